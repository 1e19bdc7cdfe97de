"""dldoctor never changes what a loader does: the same job, run without dldoctor and under
its injection, yields the same batches in the same order, the same random augmentations, and
the same exceptions (type, message with the worker's traceback, and the frames of the main
process's traceback), for fork and spawn, map-style and iterable datasets; the user's
worker_init_fn is still called with each worker id, and its exceptions come through as before.
Also where the C++ batch hooks could differ: persistent workers out of order, a sampler whose
__next__ raises, an iterator dropped mid-epoch, pin_memory without workers, and a loop fast
enough to be measured as a sample (with an exception inside it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch")

import dldoctor  # noqa: E402
from dldoctor import _ext  # noqa: E402
from dldoctor.job.events import K_MAIN_BATCH  # noqa: E402

INJECT_DIR = Path(dldoctor.__file__).resolve().parent / "_inject"

JOB = textwrap.dedent(
    r"""
    import json, os, sys, traceback
    import torch
    from torch.utils.data import DataLoader, Dataset, IterableDataset, get_worker_info

    INIT_LOG = os.environ["INIT_LOG"]

    class Augmented(Dataset):
        offset = 0
        def __len__(self):
            return 24
        def __getitem__(self, i):  # random augmentation: worker seeding must be untouched
            return {"x": torch.full((3,), float(i)) + torch.rand(3), "i": i + self.offset}

    class Stream(IterableDataset):
        def __init__(self):
            self.start, self.end = 0, 20
        def __iter__(self):
            for i in range(self.start, self.end):
                yield torch.tensor([i, i * i])

    class FaultyStream(Stream):
        def __iter__(self):
            for i in range(self.start, self.end):
                if i == 10:
                    raise KeyError(f"record {i} is truncated")
                yield torch.tensor([i, -i])

    class Faulty(Dataset):
        def __len__(self):
            return 12
        def __getitem__(self, i):
            if i == 7:
                raise ValueError(f"cannot decode sample {i}")
            return torch.tensor(i)

    def init_offset(worker_id):  # the user's worker_init_fn: must see the real worker id
        with open(INIT_LOG, "a") as f:
            f.write(f"{worker_id}\n")
        get_worker_info().dataset.offset = 1000 * (worker_id + 1)

    def init_shard(worker_id):
        with open(INIT_LOG, "a") as f:
            f.write(f"{worker_id}\n")
        info = get_worker_info()
        per = 20 // info.num_workers
        info.dataset.start, info.dataset.end = worker_id * per, (worker_id + 1) * per

    def init_fails(worker_id):
        # Worker 0 serves batch 0, so the error is raised on the same code path whatever
        # order the workers' results arrive in.
        if worker_id == 0:
            raise RuntimeError(f"no shard for worker {worker_id}")

    def pairs(batch):  # a custom collate_fn
        return {"n": len(batch), "sum": torch.stack(batch).sum(0)}

    class BrokenSampler:  # its iterator's __next__ raises mid-epoch, in the main process
        def __len__(self):
            return 12
        def __iter__(self):
            for i in range(12):
                if i == 9:
                    raise IndexError("sampler ran out at 9")
                yield i

    class Counted(Dataset):  # no randomness: which worker fetches what may vary by timing
        def __len__(self):
            return 24
        def __getitem__(self, i):
            return torch.tensor([i, 2 * i])

    class Tiny:  # thousands of batches a second in one process: the hooks' sampled path
        def __init__(self, n, bad=None):
            self.n, self.bad = n, bad
        def __len__(self):
            return self.n
        def __getitem__(self, i):
            if i == self.bad:
                raise ValueError(f"sample {i} is corrupt")
            return i + int(torch.randint(0, 3, ()).item())

    def digest(obj):
        if isinstance(obj, torch.Tensor):
            return [str(obj.dtype), obj.tolist()]
        if isinstance(obj, dict):
            return {k: digest(v) for k, v in obj.items()}
        if isinstance(obj, (list, tuple)):
            return [digest(v) for v in obj]
        return obj

    def run(loader, epochs=1, abandon_after=None, unordered=False, summary=False):
        open(INIT_LOG, "w").close()
        result = {"epochs": []}
        try:
            for epoch in range(epochs):
                it = iter(loader)
                try:
                    if abandon_after is not None and epoch == 0:  # dropped mid-epoch
                        got = [digest(next(it)) for _ in range(abandon_after)]
                        del it
                    else:
                        got = [int(b.sum()) if summary else digest(b) for b in it]
                        result["after_end"] = next(it, "exhausted")  # asked again: still ends
                    result["epochs"].append(sorted(got, key=json.dumps) if unordered else got)
                except BaseException:
                    if hasattr(it, "_shutdown_workers"):
                        it._shutdown_workers()
                    raise
        except Exception as e:
            result["error"] = {
                "type": f"{type(e).__module__}.{type(e).__qualname__}",
                "message": str(e),
                "frames": [(os.path.basename(f.filename), f.name, f.lineno)
                           for f in traceback.extract_tb(e.__traceback__)],
            }
        with open(INIT_LOG) as f:
            result["init_calls"] = sorted(int(x) for x in f.read().split())
        return result

    def main(out_path):
        torch.manual_seed(1234)
        out = {}
        # Spawned workers cost a second each, so spawn gets three in all: two persistent
        # ones for the map dataset, one for an iterable dataset that raises.
        for method in ("fork", "spawn"):
            g = torch.Generator().manual_seed(7)
            out[f"map-{method}"] = run(DataLoader(
                Augmented(), batch_size=5, shuffle=True, generator=g, num_workers=2,
                worker_init_fn=init_offset, multiprocessing_context=method,
                persistent_workers=(method == "spawn")), epochs=2)
        out["iterable-fork"] = run(DataLoader(
            Stream(), batch_size=3, num_workers=2, worker_init_fn=init_shard,
            collate_fn=pairs, multiprocessing_context="fork"))
        out["iterable-raises-spawn"] = run(DataLoader(
            FaultyStream(), batch_size=3, num_workers=1, multiprocessing_context="spawn"))
        out["raises-fork"] = run(DataLoader(
            Faulty(), batch_size=4, num_workers=1, multiprocessing_context="fork"))
        out["raises-main"] = run(DataLoader(Faulty(), batch_size=4))
        out["init-fails"] = run(DataLoader(Faulty(), batch_size=2, num_workers=2,
                                           worker_init_fn=init_fails,
                                           multiprocessing_context="fork"))
        out["single"] = run(DataLoader(Augmented(), batch_size=7, drop_last=True))
        # What the C++ hand-out and fetch hooks, and their sample, could break.
        out["persistent-unordered-fork"] = run(DataLoader(
            Counted(), batch_size=3, num_workers=2, persistent_workers=True, in_order=False,
            multiprocessing_context="fork"), epochs=2, unordered=True)
        for workers in (0, 1):
            context = "fork" if workers else None
            out[f"sampler-raises-{workers}"] = run(DataLoader(
                Counted(), batch_size=2, sampler=BrokenSampler(), num_workers=workers,
                multiprocessing_context=context))
            out[f"abandoned-{workers}"] = run(DataLoader(
                Augmented(), batch_size=4, num_workers=workers,
                multiprocessing_context=context), epochs=2, abandon_after=2)
        out["single-pin-memory"] = run(DataLoader(Augmented(), batch_size=5, pin_memory=True))
        out["fast-single"] = run(DataLoader(Tiny(8 * 40_000), batch_size=8), epochs=2,
                                 summary=True)
        out["fast-single-raises"] = run(DataLoader(Tiny(8 * 40_000, bad=8 * 31_000 + 3),
                                                   batch_size=8), summary=True)
        with open(out_path, "w") as f:
            json.dump(out, f)

    if __name__ == "__main__":
        main(sys.argv[1])
    """
)


def _start(script: Path, tmp: Path, watched: bool):
    """Starts the job, plainly or with the hooks on a ring of its own; _finish reads it."""
    tmp.mkdir()
    env = dict(os.environ)
    env["INIT_LOG"] = str(tmp / "init.log")
    ring = None
    if watched:
        run_dir = tmp / "run"
        run_dir.mkdir()
        ring = _ext.EventRing.create(str(run_dir / "events.ring"), 1 << 16)
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = os.pathsep.join([str(INJECT_DIR)] + ([old] if old else []))
        env["DLDOCTOR_RING"] = ring.path
        env["DLDOCTOR_RUN_DIR"] = str(run_dir)
    else:
        for k in ("DLDOCTOR_RING", "DLDOCTOR_RUN_DIR"):
            env.pop(k, None)
    proc = subprocess.Popen(
        [sys.executable, str(script), str(tmp / "out.json")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, tmp, ring


def _finish(started) -> dict:
    proc, tmp, ring = started
    try:
        try:
            _, stderr = proc.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            proc.kill()
            _, stderr = proc.communicate()
            raise AssertionError(f"the job ran over 240 s: {stderr[-4000:]}") from None
        assert proc.returncode == 0, stderr[-4000:]
        out = json.loads((tmp / "out.json").read_text())
        if ring is not None:
            evs = ring.drain()
            out["_events"] = len(evs)
            out["_main_batches"] = sum(1 for e in evs if e[0] == K_MAIN_BATCH)
        return out
    finally:
        if ring is not None:
            ring.close()


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("equivalence")
    script = base / "job.py"  # one path for both runs: it appears in the tracebacks
    script.write_text(JOB)
    # Both at once: what is compared is what they yield, never how fast (the ring holds 64 Ki
    # events, far more than the watched run makes).
    plain = _start(script, base / "plain", False)
    watched = _start(script, base / "watched", True)
    return _finish(plain), _finish(watched)


SCENARIOS = [
    "map-fork",
    "map-spawn",
    "iterable-fork",
    "iterable-raises-spawn",
    "raises-fork",
    "raises-main",
    "init-fails",
    "single",
    "persistent-unordered-fork",
    "sampler-raises-0",
    "sampler-raises-1",
    "abandoned-0",
    "abandoned-1",
    "single-pin-memory",
    "fast-single",
    "fast-single-raises",
]


def test_the_watched_run_was_really_watched(runs):
    assert runs[1]["_events"] > 50


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_same_behaviour_with_and_without_dldoctor(runs, scenario):
    plain, watched = runs[0][scenario], runs[1][scenario]
    assert watched == plain


def test_the_scenarios_exercise_what_they_claim(runs):
    plain = runs[0]
    for method in ("fork", "spawn"):
        m = plain[f"map-{method}"]
        assert len(m["epochs"]) == 2 and len(m["epochs"][0]) == 5
        assert m["epochs"][0] != m["epochs"][1]  # reshuffled and re-augmented
        # Once per worker per epoch; persistent workers (under spawn here) only once.
        assert m["init_calls"] == ([0, 1] if method == "spawn" else [0, 0, 1, 1])
        assert all(b["i"][1][0] >= 1000 for b in m["epochs"][0])  # the init fn took effect
    it = plain["iterable-fork"]
    assert it["init_calls"] == [0, 1]
    assert sum(b["n"] for b in it["epochs"][0]) == 20
    err = plain["raises-fork"]["error"]
    assert err["type"] == "builtins.ValueError"
    assert "cannot decode sample 7" in err["message"] and "__getitem__" in err["message"]
    spawn = plain["iterable-raises-spawn"]
    assert spawn["epochs"] == [] and spawn["error"]["type"] == "builtins.KeyError"
    assert "record 10 is truncated" in spawn["error"]["message"]
    assert plain["raises-main"]["error"]["message"] == "cannot decode sample 7"
    assert "no shard for worker 0" in plain["init-fails"]["error"]["message"]
    assert plain["init-fails"]["error"]["type"] == "builtins.RuntimeError"
    p = plain["persistent-unordered-fork"]
    assert len(p["epochs"]) == 2 and len(p["epochs"][0]) == 8
    assert p["epochs"][0] == p["epochs"][1] and p["after_end"] == "exhausted"
    for workers in (0, 1):
        err = plain[f"sampler-raises-{workers}"]["error"]
        assert err["type"] == "builtins.IndexError" and err["message"] == "sampler ran out at 9"
        a = plain[f"abandoned-{workers}"]["epochs"]
        assert [len(e) for e in a] == [2, 6]
    assert len(plain["single-pin-memory"]["epochs"][0]) == 5
    fast = plain["fast-single"]["epochs"]
    assert len(fast) == 2 and len(fast[0]) == 40_000 and fast[0] != fast[1]  # re-augmented
    bad = plain["fast-single-raises"]
    assert bad["error"]["type"] == "builtins.ValueError" and "248003" in bad["error"]["message"]
    assert bad["epochs"] == []
    # The watched run of the fast loop was sampled (hands-outs measured: a small share).
    assert runs[1]["_main_batches"] < 40_000
