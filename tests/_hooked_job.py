"""One real job with every hook scenario, run once per test session under the same
injection `dldoctor run` uses (PYTHONPATH=<_inject>:..., DLDOCTOR_RING, DLDOCTOR_RUN_DIR), for
the tests of each job module (tests/test_job_*.py). Scenarios are told apart by their dataset
class, which the side log names per loader.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections import namedtuple
from pathlib import Path

import dldoctor
from dldoctor import _ext
from dldoctor.job import events as K
from dldoctor.job import sidelog

INJECT_DIR = Path(dldoctor.__file__).resolve().parent / "_inject"

Event = namedtuple("Event", K.EVENT_FIELDS)


# -- The watcher side, exactly as `dldoctor run` sets it up -----------------------------------
class WatchedRun:
    def __init__(self, proc, events, side, run_dir, dropped):
        self.proc = proc
        self.events = events
        self.side = side
        self.run_dir = run_dir
        self.dropped = dropped


def watched_env(run_dir: Path, ring_path: Path, extra_pythonpath=(), base=None) -> dict:
    """The environment contract of `dldoctor run`: _inject first on PYTHONPATH (the user's
    entries kept after it), the ring and the run directory named."""
    env = dict(os.environ if base is None else base)
    old = env.get("PYTHONPATH")
    parts = [str(INJECT_DIR), *map(str, extra_pythonpath)] + ([old] if old else [])
    env["PYTHONPATH"] = os.pathsep.join(parts)
    env["DLDOCTOR_RING"] = str(ring_path)
    env["DLDOCTOR_RUN_DIR"] = str(run_dir)
    return env


def run_watched(
    argv, run_dir: Path, extra_pythonpath=(), env_extra=None, timeout=240, capacity=1 << 16
) -> WatchedRun:
    run_dir.mkdir(parents=True, exist_ok=True)
    ring_path = run_dir / "events.ring"
    ring = _ext.EventRing.create(str(ring_path), capacity)
    env = watched_env(run_dir, ring_path, extra_pythonpath)
    env.update(env_extra or {})
    try:
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
        events = [Event(*e) for e in ring.drain()]
        dropped = ring.dropped
    finally:
        ring.close()
    return WatchedRun(proc, events, sidelog.read_all(str(run_dir)), run_dir, dropped)


# -- The job -----------------------------------------------------------------------------------------
JOB = textwrap.dedent(
    r"""
    import json, os, signal, sys, time
    import torch
    from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

    N, BS = 16, 4

    class Base(Dataset):
        def __len__(self):
            return N
        def __getitem__(self, i):
            return torch.full((10,), float(i)), torch.tensor(i)

    class ForkMap(Base): pass
    class SpawnMap(Base): pass
    class ForkserverMap(Base): pass
    class SingleMap(Base): pass
    class PersistentMap(Base): pass
    class TwoA(Base): pass
    class TwoB(Base): pass
    class StackDump(Base): pass

    class GetItems(Base):
        def __getitems__(self, indices):  # marks its samples: label + 1000
            return [(torch.full((10,), float(i)), torch.tensor(i + 1000)) for i in indices]

    class Unordered(Base):
        def __getitem__(self, i):
            if i < BS:
                time.sleep(0.15)  # the first batch is slow: later ones overtake it
            return super().__getitem__(i)

    class Raises(Base):
        def __getitem__(self, i):
            if i == 6:
                raise ValueError("bad sample 6")
            return super().__getitem__(i)

    # Workers die on the first sample: a worker dying while the main process is receiving an
    # earlier batch's file descriptors fails that transfer with ConnectionResetError instead.
    class Dies(Base):
        def __getitem__(self, i):
            if i == 0:
                os.kill(os.getpid(), signal.SIGKILL)
            return super().__getitem__(i)

    def decode_marker(i):
        return sum(j * j for j in range(20000)) + i

    class Profiled(Base):
        def __getitem__(self, i):
            decode_marker(i)
            return super().__getitem__(i)

    class Reforked(Base):  # enough fetches a worker for a profile candidate in each epoch
        def __len__(self):
            return 4 * N

    class Stream(IterableDataset):
        def __iter__(self):
            info = get_worker_info()
            wid, nw = (info.id, info.num_workers) if info else (0, 1)
            for i in range(wid, N, nw):
                yield torch.full((10,), float(i)), torch.tensor(i)

    class SelfBatched(IterableDataset):  # makes its own batches (webdataset's .batched())
        def __iter__(self):
            info = get_worker_info()
            if info is not None and info.id > 0:
                return  # one shard, dealt to worker 0: the others have none
            for b in range(4):
                yield torch.zeros(3, 10), torch.arange(3 * b, 3 * b + 3)

    def labels(loader):
        it = iter(loader)
        try:
            return [y.tolist() for x, y in it]
        except BaseException:
            # Shut down now: an iterator kept alive by an exception's traceback cycle would be
            # collected later, possibly inside a forked worker (PyTorch then waits 5 s).
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
            raise

    def scenario_stack(out):
        from dldoctor.job import hooks as torch_hooks
        dl = DataLoader(StackDump(), batch_size=BS, num_workers=1, persistent_workers=True,
                        multiprocessing_context="fork")
        it = iter(dl)
        next(it)
        wpid = it._workers[0].pid
        # The worker's stacks the way the hang doctor takes them; this process's by a plain
        # signal to itself (its main thread is this one, busy in the capture otherwise).
        from dldoctor import _ext
        from dldoctor.job.process import PROCESS
        got = _ext.capture_stacks_detail([wpid], PROCESS.run_dir, torch_hooks.STACK_SIGNAL,
                                         2000)[wpid]
        os.kill(os.getpid(), torch_hooks.STACK_SIGNAL)
        time.sleep(0.3)
        rest = list(it)
        out["stack"] = {"worker_pid": wpid, "alive": True, "rest": len(rest),
                        "captured": got["text"], "native": got["native"], "note": got["note"]}

    def main(result_path):
        out = {}
        out["fork"] = labels(DataLoader(ForkMap(), batch_size=BS, num_workers=2,
                                        multiprocessing_context="fork"))
        out["iterable"] = labels(DataLoader(Stream(), batch_size=BS, num_workers=2,
                                            multiprocessing_context="fork"))
        out["self_batched"] = labels(DataLoader(SelfBatched(), batch_size=None, num_workers=2,
                                                multiprocessing_context="fork"))
        out["getitems"] = labels(DataLoader(GetItems(), batch_size=BS, num_workers=1,
                                            multiprocessing_context="fork"))
        out["single"] = labels(DataLoader(SingleMap(), batch_size=BS, num_workers=0))
        pdl = DataLoader(PersistentMap(), batch_size=BS, num_workers=2, persistent_workers=True,
                         multiprocessing_context="fork")
        out["persistent"] = [labels(pdl), labels(pdl)]
        a = DataLoader(TwoA(), batch_size=BS, num_workers=1, multiprocessing_context="fork")
        b = DataLoader(TwoB(), batch_size=BS, num_workers=1, multiprocessing_context="fork")
        out["two"] = [[x[1].tolist(), y[1].tolist()] for x, y in zip(a, b)]
        out["unordered"] = labels(DataLoader(Unordered(), batch_size=BS, num_workers=2,
                                             in_order=False, multiprocessing_context="fork"))
        try:
            labels(DataLoader(Raises(), batch_size=BS, num_workers=1,
                              multiprocessing_context="fork"))
        except ValueError as e:
            out["raises"] = str(e).splitlines()[-1]
        try:
            labels(DataLoader(Dies(), batch_size=BS, num_workers=1,
                              multiprocessing_context="fork"))
        except RuntimeError as e:
            out["dies"] = str(e)
        out["profiled"] = labels(DataLoader(Profiled(), batch_size=1, num_workers=1,
                                            multiprocessing_context="fork"))
        # New workers every epoch: the loader's profile schedule spans them all.
        rdl = DataLoader(Reforked(), batch_size=1, num_workers=2, multiprocessing_context="fork")
        t0 = time.monotonic()
        out["reforked"] = [len(labels(rdl)) for _ in range(6)]
        out["reforked_s"] = time.monotonic() - t0
        scenario_stack(out)
        # Last: a fork after the spawn/forkserver machinery has run can stall PyTorch's fd
        # passing for seconds (multiprocessing's resource sharer), with or without dldoctor.
        out["spawn"] = labels(DataLoader(SpawnMap(), batch_size=BS, num_workers=1,
                                         multiprocessing_context="spawn"))
        out["forkserver"] = labels(DataLoader(ForkserverMap(), batch_size=BS, num_workers=1,
                                              multiprocessing_context="forkserver"))
        import sitecustomize
        out["sitecustomize"] = getattr(sitecustomize, "USER_SITE_RAN", False)
        out["inject_on_path"] = [p for p in sys.path if p.rstrip("/").endswith("_inject")]
        out["main_pid"] = os.getpid()
        with open(result_path, "w") as f:
            json.dump(out, f)

    if __name__ == "__main__":
        main(sys.argv[1])
    """
)

USER_SITECUSTOMIZE = textwrap.dedent(
    """
    import os
    USER_SITE_RAN = True
    _mark = os.environ.get("USER_SITE_MARK")
    if _mark:
        with open(_mark, "a") as f:
            f.write(f"{os.getpid()}\\n")
    """
)


_RUNS: dict = {}


def hooked_job(tmp_path_factory) -> WatchedRun:
    """The scenario job's run, made on first use in this session."""
    if "run" not in _RUNS:
        base = tmp_path_factory.mktemp("hooks")
        script = base / "job.py"
        script.write_text(JOB)
        usersite = base / "usersite"
        usersite.mkdir()
        (usersite / "sitecustomize.py").write_text(USER_SITECUSTOMIZE)
        result = base / "result.json"
        marks = base / "marks.txt"
        run = run_watched(
            [sys.executable, str(script), str(result)],
            base / "run",
            extra_pythonpath=[usersite],
            env_extra={"USER_SITE_MARK": str(marks)},
        )
        assert run.proc.returncode == 0, run.proc.stderr[-4000:]
        run.result = json.loads(result.read_text())
        run.marks = {int(x) for x in marks.read_text().split()}
        _RUNS["run"] = run
    return _RUNS["run"]


def loader_of(job, dataset: str) -> int:
    ids = {
        r["loader"]
        for r in job.side
        if r.get("type") == "iter_start" and r["dataset"].endswith("." + dataset)
    }
    assert len(ids) == 1, (dataset, ids)
    return ids.pop()


def events(job, loader: int, kind: int) -> list:
    return [e for e in job.events if e.loader == loader and e.kind == kind]


def check_batches_match(
    job,
    lid: int,
    n_batches: int,
    sample_bytes: int | None = None,
    end_reason: int = K.END_EXHAUSTED,
):
    """Every batch is seen in a worker and handed out by the main process, with the same
    index and worker id on both sides."""
    worker = events(job, lid, K.K_WORKER_BATCH)
    main = events(job, lid, K.K_MAIN_BATCH)
    assert len(worker) == n_batches and len(main) == n_batches
    assert all(e.weight == 1 for e in worker)  # a slow stream: every fetch is measured
    by_index = {e.index: e for e in worker}
    assert sorted(by_index) == list(range(n_batches))
    assert sorted(e.index for e in main) == list(range(n_batches))
    for m in main:
        w = by_index[m.index]
        assert m.worker == w.worker
        assert m.v0 >= 0  # blocked time
    for w in worker:
        assert w.pid != job.result["main_pid"]
        assert w.count == 4
        assert w.v0 >= w.v1 >= 0  # fetch covers collate
        # Thread CPU and bytes: -1 on short fetches between samples (every 16th is
        # measured); CPU never more than the fetch's wall time.
        assert w.v2 == -1 or 0 <= w.v2 <= w.v0 + 1_000_000
        if sample_bytes is not None:
            assert w.v3 in (sample_bytes, -1)
            assert (w.v2 == -1) == (w.v3 == -1)  # measured together
    assert any(w.v2 >= 0 for w in worker)  # each worker's first fetch is measured
    end = events(job, lid, K.K_ITER_END)
    assert [(e.index, e.v0) for e in end] == [(n_batches, end_reason)]


# (10 float32 + 1 int64) per sample, 4 samples: the storages the batch really carries.
BATCH_BYTES = 4 * 10 * 4 + 4 * 8
