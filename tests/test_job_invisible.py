"""dldoctor is invisible to the job: every call into the user's dataset (__len__,
__getitem__, __getitems__, __getstate__/__setstate__, __iter__) happens exactly as often, in
the same kind of process, with and without dldoctor, for map datasets (with and without
__getitems__) and iterable ones, fork and spawn, persistent workers or not; and the warnings
the job prints, and their count, are the same.

The job logs each call as one line (pid, role, method) to a file opened for append (the
workers leave by os._exit: no counters at exit); the test compares the counts per scenario,
role and method of an unwatched run with a run under dldoctor's injection.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("torch")

from _hooked_job import run_watched  # noqa: E402

JOB = textwrap.dedent(
    r"""
    import os, sys, warnings
    import torch
    from torch.utils.data import DataLoader, Dataset, IterableDataset

    LOG = os.environ["CALL_LOG"]
    MAIN = int(os.environ.get("MAIN_PID") or os.getpid())
    os.environ["MAIN_PID"] = str(MAIN)  # spawned workers inherit it
    N, BS = 16, 4
    SCENARIO = os.environ.get("SCENARIO", "")

    def log(what):
        role = "main" if os.getpid() == MAIN else "worker"
        with open(LOG, "a") as f:
            f.write(f"{os.environ.get('SCENARIO', '')} {role} {what}\n")

    class Counted:
        def __getstate__(self):
            log("__getstate__")
            warnings.warn(f"{type(self).__name__} pickled (shown once per location)")
            # A common pattern (silencing a library's pickling warnings): it resets Python's
            # once-per-location warning registry, so a second pickling repeats warnings.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return dict(self.__dict__)
        def __setstate__(self, state):
            log("__setstate__")
            self.__dict__.update(state)
        def __len__(self):
            log("__len__")
            return N

    class Map(Counted, Dataset):
        def __init__(self):
            self.values = list(range(N))
        def __getitem__(self, i):
            log("__getitem__")
            return torch.tensor([self.values[i]])

    class MapItems(Map):
        def __getitems__(self, indices):
            log("__getitems__")
            return [torch.tensor([self.values[i]]) for i in indices]

    class Stream(Counted, IterableDataset):
        def __init__(self):
            self.start, self.end = 0, N
        def __iter__(self):
            log("__iter__")
            info = torch.utils.data.get_worker_info()
            step = info.num_workers if info else 1
            first = self.start + (info.id if info else 0)
            return iter(torch.tensor([i]) for i in range(first, self.end, step))

    class Order(torch.utils.data.Sampler):  # the user's own sampler: its calls count too
        def __init__(self):
            self.n = N
        def __len__(self):
            log("sampler.__len__")
            return self.n
        def __iter__(self):
            log("sampler.__iter__")
            return iter(range(self.n - 1, -1, -1))

    KINDS = {"map": Map, "items": MapItems, "iterable": Stream, "sampler": Map}

    def epoch_done():
        warnings.warn("an epoch ended (shown once per location)", UserWarning)

    def main():
        for name in sys.argv[1:]:
            kind, method, persistent = name.split("-")
            os.environ["SCENARIO"] = name
            loader = DataLoader(
                KINDS[kind](), batch_size=BS, num_workers=1 if method == "spawn" else 2,
                multiprocessing_context=method, persistent_workers=persistent == "p",
                sampler=Order() if kind == "sampler" else None,
            )
            seen = []
            for _ in range(2):
                for b in loader:
                    seen.extend(b.flatten().tolist())
                epoch_done()
            assert sorted(seen) == sorted(list(range(N)) * 2), seen
            del loader

    if __name__ == "__main__":
        main()
    """
)

SCENARIOS = [
    f"{kind}-{method}-{p}"
    for kind in ("map", "items", "iterable")
    for method in ("fork", "spawn")
    for p in ("p", "n")
    if not (kind == "items" and method == "spawn")  # __getitems__: same path as map under fork
] + ["sampler-fork-n"]


def _counts(log_path) -> collections.Counter:
    with open(log_path) as f:
        return collections.Counter(tuple(line.split()) for line in f if line.strip())


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "Warning:" in line]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("invisible")
    script = base / "job.py"
    script.write_text(JOB)
    out = {}
    for watched in (False, True):
        log = base / f"calls-{watched}.log"
        env = {"CALL_LOG": str(log)}
        argv = [sys.executable, str(script), *SCENARIOS]
        if watched:
            r = run_watched(argv, base / "run", env_extra=env, timeout=400)
            proc, side = r.proc, r.side
        else:
            clean = {k: v for k, v in os.environ.items() if not k.startswith("DLDOCTOR_")}
            proc = subprocess.run(
                argv, env={**clean, **env}, capture_output=True, text=True, timeout=400
            )
            side = []
        assert proc.returncode == 0, proc.stderr[-4000:]
        out[watched] = (_counts(log), proc.stderr, side)
    return out


def test_the_watched_run_was_watched(runs):
    side = runs[True][2]
    starts = {r["loader"] for r in side if r.get("type") == "iter_start"}
    assert len(starts) == len(SCENARIOS)
    spawned = {r["loader"] for r in side if r.get("type") == "dataset" and r.get("pickled_bytes")}
    # The bytes torch sent each spawned worker were counted (the dataset's state among them).
    assert len(spawned) == sum(1 for s in SCENARIOS if "-spawn-" in s)
    # The samples per epoch, read from torch's own sampler state, not the dataset's __len__.
    lengths = {}
    for r in side:
        if r.get("type") == "dataset":
            lengths.setdefault(r["loader"], []).append(r.get("length"))
    by_kind = {}
    for r in side:
        if r.get("type") == "iter_start" and r["loader"] in lengths:
            kind = "sampler" if r["sampler"].endswith(".Order") else r["dataset"]
            by_kind.setdefault(kind, set()).add(tuple(lengths[r["loader"]]))
    assert by_kind == {
        "__main__.Map": {(16,)},
        "__main__.MapItems": {(16,)},
        "__main__.Stream": {(None,)},
        # The user's sampler is never asked its length: the first epoch's batches tell it.
        "sampler": {(None, 16)},
    }


def test_the_job_calls_what_the_test_claims(runs):
    plain = runs[False][0]
    assert plain[("map-fork-n", "main", "__len__")] >= 2  # the sampler, each epoch
    assert plain[("map-fork-n", "worker", "__getitem__")] == 32
    assert plain[("items-fork-p", "worker", "__getitems__")] == 8
    assert plain[("iterable-fork-n", "worker", "__iter__")] == 4  # 2 workers, 2 epochs
    assert plain[("map-spawn-n", "main", "__getstate__")] == 2  # 1 worker, 2 starts
    assert plain[("map-spawn-p", "worker", "__setstate__")] == 1


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_every_call_into_the_dataset_is_torchs_own(runs, scenario):
    def of(counts):
        return {k[1:]: v for k, v in counts.items() if k[0] == scenario}

    assert of(runs[True][0]) == of(runs[False][0])


def test_the_warnings_are_the_same_and_as_many(runs):
    plain, watched = _warnings(runs[False][1]), _warnings(runs[True][1])
    assert plain, "the job's own warning was not shown"
    assert watched == plain


# -- "Exception ignored in ... __del__ ... can only test a child process" ------------------------
# The cause: an iterator of torch's own left in a reference cycle (an exception raised out of
# it holds its frames) is garbage the collector has not yet reached when a worker is forked;
# the worker's collector finds it and runs its __del__ there, whose _shutdown_workers calls
# join/is_alive on Process objects the worker did not start. How many a run prints depends on
# where the collector happens to run; what dldoctor must not do is keep such an iterator alive
# or make one garbage: with the collector run only at known points (gc disabled, one collect
# in a forked worker), the count is the same with and without dldoctor.
GC_JOB = textwrap.dedent(
    r"""
    import gc, sys
    import torch
    from torch.utils.data import DataLoader, Dataset, IterableDataset

    gc.disable()  # the collector runs only in the forked worker below

    class Items(Dataset):
        def __init__(self, bad=None):
            self.bad = bad
        def __len__(self):
            return 12
        def __getitem__(self, i):
            if i == self.bad:
                raise ValueError(f"sample {i}")
            return torch.tensor([i])

    class Stream(IterableDataset):
        def __iter__(self):
            yield from (torch.tensor([i]) for i in range(4))
            raise KeyError("truncated")

    def init_fails(worker_id):
        raise RuntimeError("init")

    def collect(worker_id):
        gc.collect()

    def main():
        for _ in range(2):
            for make in (
                lambda: DataLoader(Items(bad=5), num_workers=2),  # a worker raises
                lambda: DataLoader(Items(), num_workers=2, worker_init_fn=init_fails),
                lambda: DataLoader(Stream(), num_workers=2),
            ):
                try:
                    for _ in make():
                        pass
                except Exception:
                    pass
            it = iter(DataLoader(Items(), num_workers=2))  # abandoned mid-epoch
            next(it)
            del it
            dl = DataLoader(Items(), num_workers=2, persistent_workers=True)
            for _ in range(2):
                for _ in dl:
                    pass
            del dl
        for _ in DataLoader(Items(), num_workers=1, worker_init_fn=collect):
            pass

    if __name__ == "__main__":
        main()
    """
)

CHILD_LINE = "AssertionError: can only test a child process"


def test_the_forked_childs_del_lines_are_as_many_as_without_dldoctor(tmp_path):
    script = tmp_path / "gc_job.py"
    script.write_text(GC_JOB)
    argv = [sys.executable, str(script)]
    clean = {k: v for k, v in os.environ.items() if not k.startswith("DLDOCTOR_")}
    plain = subprocess.run(argv, env=clean, capture_output=True, text=True, timeout=300)
    watched = run_watched(argv, tmp_path / "run", timeout=300).proc
    assert plain.returncode == 0 and watched.returncode == 0, watched.stderr[-3000:]
    n_plain, n_watched = plain.stderr.count(CHILD_LINE), watched.stderr.count(CHILD_LINE)
    assert n_plain >= 4  # the job makes such garbage: a leak or a new cycle would show
    assert n_watched == n_plain, watched.stderr[-3000:]
