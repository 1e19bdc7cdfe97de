"""torch_hooks on real DataLoaders, under the same injection `dldoctor run` uses.

One job (a subprocess started with PYTHONPATH=<_inject>:..., DLDOCTOR_RING, DLDOCTOR_RUN_DIR)
runs every scenario once; each test checks its scenario's events and side-log records.
Scenarios are told apart by their dataset class, which the side log names per loader.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from collections import namedtuple
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import dldoctor  # noqa: E402
from dldoctor import _ext  # noqa: E402
from dldoctor.job import hooks as torch_hooks  # noqa: E402
from dldoctor.job import sidelog as _sidelog  # noqa: E402

INJECT_DIR = Path(dldoctor.__file__).resolve().parent / "_inject"

Event = namedtuple("Event", "kind pid t_ns flags loader worker index count v0 v1 v2 v3")
K = torch_hooks


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
    return WatchedRun(proc, events, _sidelog.read_all(str(run_dir)), run_dir, dropped)


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

    class Stream(IterableDataset):
        def __iter__(self):
            info = get_worker_info()
            wid, nw = (info.id, info.num_workers) if info else (0, 1)
            for i in range(wid, N, nw):
                yield torch.full((10,), float(i)), torch.tensor(i)

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
        os.kill(wpid, torch_hooks.STACK_SIGNAL)
        os.kill(os.getpid(), torch_hooks.STACK_SIGNAL)
        time.sleep(0.3)
        rest = list(it)
        out["stack"] = {"worker_pid": wpid, "alive": True, "rest": len(rest)}

    def main(result_path):
        out = {}
        out["fork"] = labels(DataLoader(ForkMap(), batch_size=BS, num_workers=2,
                                        multiprocessing_context="fork"))
        out["iterable"] = labels(DataLoader(Stream(), batch_size=BS, num_workers=2,
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


@pytest.fixture(scope="module")
def job(tmp_path_factory):
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
    return run


def loader_of(job, dataset: str) -> int:
    ids = {
        r["loader"]
        for r in job.side
        if r.get("type") == "iter_start" and r["dataset"].endswith("." + dataset)
    }
    assert len(ids) == 1, (dataset, ids)
    return ids.pop()


def events(job, loader: int, kind: int) -> list[Event]:
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
        # Thread CPU and bytes: -1 on short fetches between samples (DETAIL_SAMPLE_EVERY);
        # CPU never more than the fetch's wall time.
        assert w.v2 == -1 or 0 <= w.v2 <= w.v0 + 1_000_000
        if sample_bytes is not None:
            assert w.v3 in (sample_bytes, -1)
            assert (w.v2 == -1) == (w.v3 == -1)  # measured together
    assert any(w.v2 >= 0 for w in worker)  # each worker's first fetch is measured
    end = events(job, lid, K.K_ITER_END)
    assert [(e.index, e.v0) for e in end] == [(n_batches, end_reason)]


# (10 float32 + 1 int64) per sample, 4 samples: the storages the batch really carries.
BATCH_BYTES = 4 * 10 * 4 + 4 * 8


@pytest.mark.parametrize(
    "dataset,workers,method",
    [("ForkMap", 2, 1), ("SpawnMap", 1, 2), ("ForkserverMap", 1, 3)],
)
def test_events_for_every_start_method(job, dataset, workers, method):
    lid = loader_of(job, dataset)
    (start,) = events(job, lid, K.K_ITER_START)
    assert (start.worker, start.count, start.index) == (workers, 4, 2)  # workers, bs, prefetch
    assert start.v1 == job.result["main_pid"] and start.v2 == method and start.v3 == 1
    assert start.flags & K.F_IN_ORDER and not start.flags & K.F_ITERABLE_DATASET
    starts = events(job, lid, K.K_WORKER_START)
    assert sorted(e.worker for e in starts) == list(range(workers))
    if method != 3:  # a forkserver worker's parent is the fork server
        assert all(e.v0 == job.result["main_pid"] for e in starts)
    assert sorted(e.worker for e in events(job, lid, K.K_WORKER_EXIT)) == list(range(workers))
    check_batches_match(job, lid, 4, BATCH_BYTES)
    assert job.result[{1: "fork", 2: "spawn", 3: "forkserver"}[method]] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
        [12, 13, 14, 15],
    ]


def test_spawned_workers_run_the_users_sitecustomize_too(job):
    lid = loader_of(job, "SpawnMap")
    (w,) = events(job, lid, K.K_WORKER_START)
    assert w.pid in job.marks  # chained in the spawned worker
    assert job.result["main_pid"] in job.marks
    assert job.result["sitecustomize"] is True  # `import sitecustomize` is the user's module
    assert job.result["inject_on_path"] == []


def test_worker_start_records_the_process(job):
    lid = loader_of(job, "SpawnMap")
    (w,) = events(job, lid, K.K_WORKER_START)
    (rec,) = [r for r in job.side if r.get("type") == "worker_start" and r["pid"] == w.pid]
    assert rec["loader"] == lid and rec["worker"] == 0 and rec["ppid"] == job.result["main_pid"]
    # A spawned worker started well before its loop ran (interpreter + torch import).
    assert 0 < w.v1 <= w.t_ns


def test_iterable_dataset(job):
    lid = loader_of(job, "Stream")
    (start,) = events(job, lid, K.K_ITER_START)
    assert start.flags & K.F_ITERABLE_DATASET
    check_batches_match(job, lid, 4, BATCH_BYTES)
    assert sorted(sum(job.result["iterable"], [])) == list(range(16))


def test_dataset_with_getitems_still_uses_it(job):
    lid = loader_of(job, "GetItems")
    check_batches_match(job, lid, 4, BATCH_BYTES)
    assert all(y >= 1000 for batch in job.result["getitems"] for y in batch)


def test_single_process_loader_is_measured_in_the_main_process(job):
    lid = loader_of(job, "SingleMap")
    (start,) = events(job, lid, K.K_ITER_START)
    assert start.worker == 0 and start.v2 == 0  # no workers, no start method
    fetches = events(job, lid, K.K_WORKER_BATCH)
    main = events(job, lid, K.K_MAIN_BATCH)
    assert [e.index for e in fetches] == [0, 1, 2, 3] == [e.index for e in main]
    for f, m in zip(fetches, main):
        assert f.pid == m.pid == job.result["main_pid"]
        assert f.worker == m.worker == -1
        assert f.v3 in (BATCH_BYTES, -1) and f.count == m.count == 4
        assert m.v0 >= f.v0  # blocked for the whole fetch
    assert fetches[0].v3 == BATCH_BYTES  # the process's first fetch is always measured
    assert main[0].v1 == -1 and all(m.v1 >= 0 for m in main[1:])
    assert not events(job, lid, K.K_WORKER_START)


def test_persistent_workers_over_two_epochs(job):
    lid = loader_of(job, "PersistentMap")
    starts = events(job, lid, K.K_ITER_START)
    assert [s.v3 for s in starts] == [1, 2]
    assert all(s.flags & K.F_PERSISTENT_WORKERS for s in starts)
    assert len(events(job, lid, K.K_WORKER_START)) == 2  # started once, reused
    ends = events(job, lid, K.K_ITER_END)
    assert [(e.index, e.v0, e.v1) for e in ends] == [(4, 0, 1), (4, 0, 2)]
    # Batch indices restart each epoch; each epoch has its own full set, on both sides.
    second = starts[1].t_ns
    for kind in (K.K_WORKER_BATCH, K.K_MAIN_BATCH):
        evs = events(job, lid, kind)
        assert sorted(e.index for e in evs if e.t_ns < second) == [0, 1, 2, 3]
        assert sorted(e.index for e in evs if e.t_ns >= second) == [0, 1, 2, 3]
    epochs = [r["epoch"] for r in job.side if r.get("type") == "iter_start" and r["loader"] == lid]
    assert epochs == [1, 2]
    assert job.result["persistent"][0] == job.result["persistent"][1]


def test_every_loader_gets_its_own_id(job):
    ids = [r["loader"] for r in job.side if r.get("type") == "iter_start"]
    per_dataset = {}
    for r in job.side:
        if r.get("type") == "iter_start":
            per_dataset.setdefault(r["dataset"], set()).add(r["loader"])
    assert all(len(v) == 1 for v in per_dataset.values())
    assert len(set(ids)) == len(per_dataset)
    a, b = loader_of(job, "TwoA"), loader_of(job, "TwoB")
    assert a != b
    check_batches_match(job, a, 4, BATCH_BYTES)
    # zip() stops at a's StopIteration without asking b again: b's epoch is cut short.
    check_batches_match(job, b, 4, BATCH_BYTES, end_reason=K.END_SHUTDOWN)


def test_out_of_order_batches_keep_their_index(job):
    lid = loader_of(job, "Unordered")
    (start,) = events(job, lid, K.K_ITER_START)
    assert not start.flags & K.F_IN_ORDER
    check_batches_match(job, lid, 4, BATCH_BYTES)
    main = events(job, lid, K.K_MAIN_BATCH)
    # The slow first batch was overtaken: handed out later than some later batch.
    assert [e.index for e in main] != [0, 1, 2, 3]
    handed = [sorted(batch)[0] // 4 for batch in job.result["unordered"]]
    assert handed == [e.index for e in main]


def test_exception_in_getitem_is_recorded_and_passes_through(job):
    lid = loader_of(job, "Raises")
    (exc,) = events(job, lid, K.K_WORKER_EXCEPTION)
    assert exc.index == 1 and exc.worker == 0
    (rec,) = [r for r in job.side if r.get("type") == "worker_exception" and r["loader"] == lid]
    assert rec["exc_type"] == "builtins.ValueError" and rec["message"] == "bad sample 6"
    assert "__getitem__" in rec["traceback"] and "torch_hooks" not in rec["traceback"]
    assert job.result["raises"] == "ValueError: bad sample 6"


def test_worker_killed_by_a_signal_is_reported(job):
    lid = loader_of(job, "Dies")
    (died,) = events(job, lid, K.K_WORKER_DIED)
    assert died.worker == 0 and died.v1 == 9 and died.v0 == -1
    (rec,) = [r for r in job.side if r.get("type") == "worker_died" and r["loader"] == lid]
    assert rec["signal_name"] == "SIGKILL" and rec["worker_pid"] == died.v2
    assert "DataLoader worker" in job.result["dies"] and str(died.v2) in job.result["dies"]


def test_exit_status_of_dead_workers_without_reaping_them():
    # A worker that exits with a code is seen by PyTorch only after its 5 s poll when the
    # SIGCHLD lands on another thread, so this is checked on plain processes.
    import multiprocessing as mp
    import signal
    import time

    ctx = mp.get_context("fork")
    exited = ctx.Process(target=os._exit, args=(3,))
    killed = ctx.Process(target=time.sleep, args=(60,))
    exited.start()
    killed.start()
    os.kill(killed.pid, signal.SIGKILL)
    for p in (exited, killed):  # wait for the exit without reaping (as PyTorch's handler)
        while os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            time.sleep(0.01)
    assert torch_hooks._exit_status(exited) == (3, None)
    assert torch_hooks._exit_status(killed) == (None, signal.SIGKILL)
    assert exited.exitcode == 3 and killed.exitcode == -signal.SIGKILL  # still reapable
    assert torch_hooks._exit_status(exited) == (3, None)  # from multiprocessing's record now


def test_sampled_profile_names_the_hot_function(job):
    lid = loader_of(job, "Profiled")
    batches = events(job, lid, K.K_WORKER_BATCH)
    profiled = [e for e in batches if e.flags & K.B_PROFILED]
    assert [e.index for e in profiled] == [K.PROFILE_FIRST - 1]
    (rec,) = [r for r in job.side if r.get("type") == "profile" and r["loader"] == lid]
    names = [f["name"] for f in rec["functions"]]
    assert any(n.endswith("decode_marker") for n in names), names
    hot = next(f for f in rec["functions"] if f["name"].endswith("decode_marker"))
    line = JOB.splitlines().index("def decode_marker(i):") + 1
    assert hot["calls"] == 1 and hot["cumulative_ms"] > 0
    assert hot["location"].endswith(f"job.py:{line}")
    assert all("torch_hooks" not in f["location"] for f in rec["functions"])


def test_stack_signal_dumps_worker_and_main_stacks(job):
    wpid = job.result["stack"]["worker_pid"]
    worker_dump = (job.run_dir / f"stack-{wpid}.txt").read_text()
    assert "_worker_loop" in worker_dump
    main_dump = (job.run_dir / f"stack-{job.result['main_pid']}.txt").read_text()
    assert "scenario_stack" in main_dump
    assert job.result["stack"]["rest"] == 3  # the job went on after the dumps
    procs = {r["pid"]: r for r in job.side if r.get("type") == "process"}
    assert procs[wpid]["stack_signal"] == K.STACK_SIGNAL


def test_thread_facts_recorded_at_iterator_creation(job):
    rec = next(r for r in job.side if r.get("type") == "iter_start")
    assert rec["threads"]["active"] >= 1 and "MainThread" in rec["threads"]["non_daemon"]
    assert rec["start_method"] == "fork"


def test_nothing_dropped_and_no_hook_errors(job):
    assert job.dropped == 0
    assert not [r for r in job.side if r.get("type") in ("hook_error", "inject_error", "hooks")]


def test_no_ring_configured_means_no_instrumentation(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(INJECT_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env.pop("DLDOCTOR_RING", None)
    code = (
        "import sys, torch.utils.data.dataloader as d;"
        "print(hasattr(d._MultiProcessingDataLoaderIter._next_data, '__dldoctor_orig__'),"
        " 'dldoctor.job.hooks' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_a_broken_ring_disables_quietly(tmp_path):
    (tmp_path / "junk").write_bytes(b"x" * 8192)
    env = watched_env(tmp_path, tmp_path / "junk")
    code = (
        "import torch; from torch.utils.data import DataLoader;"
        "print(sum(int(b.sum()) for b in DataLoader(list(range(10)), batch_size=5)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "45" and out.stderr == ""
    (rec,) = _sidelog.read_all(str(tmp_path))
    assert rec["type"] == "hook_error" and "not an event ring" in rec["error"]


# -- In-process: install() as dldoctor.watch() calls it --------------------------------------------
@pytest.fixture()
def in_process(tmp_path):
    ring = _ext.EventRing.create(str(tmp_path / "events.ring"), 4096)
    assert torch_hooks.install(ring.path, str(tmp_path))
    yield ring
    torch_hooks.uninstall()
    ring.close()


def test_install_is_idempotent_and_uninstall_restores(tmp_path):
    import torch.utils.data.dataloader as dl

    originals = {
        name: dl._MultiProcessingDataLoaderIter.__dict__[name]
        for name in ("__init__", "_next_data", "_get_data", "_reset", "_shutdown_workers")
    }
    fetch = torch.utils.data._utils.fetch._MapDatasetFetcher.fetch
    loop = torch.utils.data._utils.worker._worker_loop
    ring = _ext.EventRing.create(str(tmp_path / "r"), 64)
    try:
        assert torch_hooks.install(ring.path, str(tmp_path))
        patched = torch_hooks.installed()["patched"]
        assert torch_hooks.install(ring.path, str(tmp_path))
        assert torch_hooks.installed()["patched"] == patched  # nothing wrapped twice
        assert not torch_hooks.installed()["missing"]
        new_loop = torch.utils.data._utils.worker._worker_loop
        assert new_loop is not loop and new_loop.__dldoctor_orig__ is loop
        # Picklable by name: resolves to whatever the unpickling process has patched.
        assert pickle.loads(pickle.dumps(new_loop)) is new_loop
    finally:
        torch_hooks.uninstall()
        ring.close()
    for name, fn in originals.items():
        assert dl._MultiProcessingDataLoaderIter.__dict__[name] is fn
    assert torch.utils.data._utils.fetch._MapDatasetFetcher.fetch is fetch
    assert torch.utils.data._utils.worker._worker_loop is loop
    assert not _ext.trace_active()


def test_in_process_single_process_loader(in_process):
    from torch.utils.data import DataLoader

    torch_hooks._prof[0], torch_hooks._last_fetch[0] = 0, 1 << 62  # next fetch: measured
    data = [torch.arange(3) + i for i in range(6)]
    got = [b.tolist() for b in DataLoader(data, batch_size=2)]
    assert got == [[[0, 1, 2], [1, 2, 3]], [[2, 3, 4], [3, 4, 5]], [[4, 5, 6], [5, 6, 7]]]
    evs = [Event(*e) for e in in_process.drain()]
    kinds = [e.kind for e in evs]
    assert kinds.count(K.K_WORKER_BATCH) == 3 and kinds.count(K.K_MAIN_BATCH) == 3
    assert kinds[0] == K.K_ITER_START and kinds[-1] == K.K_ITER_END
    sizes = [e.v3 for e in evs if e.kind == K.K_WORKER_BATCH]
    assert sizes[0] == 48 and set(sizes) <= {48, -1}


def test_unwatched_iterators_pass_through(in_process):
    from torch.utils.data import DataLoader

    it = iter(DataLoader(list(range(4)), batch_size=2))
    torch_hooks._iters.clear()  # as for an iterator created before install()
    assert [b.tolist() for b in it] == [[0, 1], [2, 3]]
    assert not [e for e in in_process.drain() if e[0] in (K.K_MAIN_BATCH, K.K_WORKER_BATCH)]


def test_worker_init_chains_the_users_function():
    seen = []
    wi = torch_hooks._WorkerInit(5, "/nonexistent", None, seen.append)
    clone = pickle.loads(pickle.dumps(torch_hooks._WorkerInit(5, "/r", "/d", len)))
    assert (clone.loader_id, clone.ring_path, clone.run_dir, clone.user_fn) == (5, "/r", "/d", len)
    torch_hooks._worker["started"] = True  # as if the _worker_loop hook had run
    try:
        wi(3)
        assert seen == [3]

        def bad(worker_id):
            raise KeyError(f"no shard {worker_id}")

        with pytest.raises(KeyError, match="no shard 2") as e:
            torch_hooks._WorkerInit(5, None, None, bad)(2)
        frames = [f.name for f in __import__("traceback").extract_tb(e.value.__traceback__)]
        assert "__call__" not in frames and frames[-1] == "bad"
    finally:
        torch_hooks._worker["started"] = False


def test_batch_bytes_walks_structures_and_dedups_storages():
    Pair = namedtuple("Pair", "a b")
    t = torch.zeros(100, dtype=torch.float32)  # 400 bytes
    view = t[10:20]  # same storage
    u = torch.zeros(5, dtype=torch.int64)  # 40 bytes
    assert torch_hooks._batch_bytes(t) == 400
    assert torch_hooks._batch_bytes({"x": [t, view], "y": Pair(u, "name")}) == 440
    assert torch_hooks._batch_bytes(("no", "tensors", 3)) == 0
    many = [torch.zeros(1) for _ in range(torch_hooks.BYTES_MAX_ITEMS + 10)]
    assert torch_hooks._batch_bytes(many) == -1


WATCH_STYLE_JOB = textwrap.dedent(
    r"""
    import os, sys
    from dldoctor.job import hooks as torch_hooks
    assert torch_hooks.install(sys.argv[1], sys.argv[2])
    assert "torch" not in sys.modules  # hooked on import, as dldoctor.watch() may have to
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Late(Dataset):
        def __len__(self):
            return 8
        def __getitem__(self, i):
            return torch.tensor([i])

    if __name__ == "__main__":
        # Spawned worker started with no dldoctor environment: _WorkerInit instruments it.
        dl = DataLoader(Late(), batch_size=4, num_workers=1, multiprocessing_context="spawn")
        print([b.flatten().tolist() for b in dl])
    """
)


def test_install_before_torch_import_and_uninstrumented_spawned_worker(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(WATCH_STYLE_JOB)
    ring = _ext.EventRing.create(str(tmp_path / "events.ring"), 4096)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLDOCTOR_")}
    try:
        out = subprocess.run(
            [sys.executable, str(script), ring.path, str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        evs = [Event(*e) for e in ring.drain()]
    finally:
        ring.close()
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[[0, 1, 2, 3], [4, 5, 6, 7]]"
    (start,) = [e for e in evs if e.kind == K.K_WORKER_START]
    fetches = [e for e in evs if e.kind == K.K_WORKER_BATCH]
    assert [e.index for e in fetches] == [0, 1]  # the batch index, read from the worker loop
    assert all(e.pid == start.pid and e.worker == 0 for e in fetches)
    assert sorted(e.index for e in evs if e.kind == K.K_MAIN_BATCH) == [0, 1]


def test_in_process_fork_workers(in_process):
    from torch.utils.data import DataLoader

    loader = DataLoader(
        list(range(12)), batch_size=4, num_workers=1, multiprocessing_context="fork"
    )
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    evs = [Event(*e) for e in in_process.drain()]
    fetches = [e for e in evs if e.kind == K.K_WORKER_BATCH]
    assert [e.index for e in fetches] == [0, 1, 2] and {e.pid for e in fetches} != {os.getpid()}
    assert [e.index for e in evs if e.kind == K.K_MAIN_BATCH] == [0, 1, 2]
    assert [e.kind for e in evs].count(K.K_WORKER_EXIT) == 1


def test_pin_memory_time_is_measured_once_per_batch(in_process):
    pin = torch.utils.data._utils.pin_memory.pin_memory
    assert pin.__dldoctor_orig__ is not None

    class Pinnable:  # what pin_memory() calls on objects that know how to pin themselves
        def pin_memory(self):
            return self

    batch = [Pinnable(), {"a": Pinnable(), "b": (Pinnable(), "text")}]
    torch_hooks._pin_ns.clear()
    out = pin(batch)
    assert out == batch and out is not batch  # PyTorch copies the containers
    assert list(torch_hooks._pin_ns) == [id(out)]  # the outer call only, not each element
    assert torch_hooks._pin_ns[id(out)] > 0
    torch_hooks._pin_ns.clear()


def test_python_dash_m_from_a_shell_script_is_instrumented(tmp_path):
    pkg = tmp_path / "jobpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "__main__.py").write_text(
        "import os, torch\n"
        "from torch.utils.data import DataLoader\n"
        "print(os.getpid(), len(list(DataLoader(list(range(6)), batch_size=2))))\n"
    )
    script = tmp_path / "train.sh"
    script.write_text(f'#!/bin/sh\ncd "{tmp_path}" && exec "{sys.executable}" -m jobpkg\n')
    script.chmod(0o755)
    run = run_watched([str(script)], tmp_path / "run")
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    pid, batches = map(int, run.proc.stdout.split())
    assert batches == 3
    main = [e for e in run.events if e.kind == K.K_MAIN_BATCH]
    assert [e.index for e in main] == [0, 1, 2] and {e.pid for e in main} == {pid}
