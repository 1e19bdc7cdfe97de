"""dldoctor.job.main on real DataLoaders: each iterator's start, hand-outs and end; a
single-process loader measured in the main process; loader ids; a fast single-process loop
measured as a sample with exact counts; pin-memory time; iterators created before install()
pass through untouched."""

from __future__ import annotations

import gc
import os
import sys
import time

import pytest

torch = pytest.importorskip("torch")

from _hooked_job import (  # noqa: E402
    BATCH_BYTES,
    Event,
    check_batches_match,
    events,
    hooked_job,
    loader_of,
    run_watched,
)
from dldoctor import _ext  # noqa: E402
from dldoctor.job import events as K  # noqa: E402
from dldoctor.job import hooks, main  # noqa: E402


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return hooked_job(tmp_path_factory)


def test_single_process_loader_is_measured_in_the_main_process(job):
    lid = loader_of(job, "SingleMap")
    (start,) = events(job, lid, K.K_ITER_START)
    assert start.worker == 0 and start.v2 == 0  # no workers, no start method
    fetches = events(job, lid, K.K_WORKER_BATCH)
    handouts = events(job, lid, K.K_MAIN_BATCH)
    assert [e.index for e in fetches] == [0, 1, 2, 3] == [e.index for e in handouts]
    for f, m in zip(fetches, handouts):
        assert f.pid == m.pid == job.result["main_pid"]
        assert f.worker == m.worker == -1
        assert f.v3 in (BATCH_BYTES, -1) and f.count == m.count == 4
        assert m.v0 >= f.v0  # blocked for the whole fetch
        assert f.weight == m.weight == 1
    assert fetches[0].v3 == BATCH_BYTES  # an iterator's first fetch is always measured
    assert handouts[0].v1 == -1 and all(m.v1 >= 0 for m in handouts[1:])
    assert not events(job, lid, K.K_WORKER_START)
    (end,) = events(job, lid, K.K_ITER_END)
    assert (end.index, end.v2, end.v3) == (4, 0, 0)  # nothing left unmeasured


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


def _epoch(data) -> list:
    from torch.utils.data import DataLoader

    return [b.tolist() for b in DataLoader(data, batch_size=2)]


def test_a_loop_that_makes_its_loader_each_epoch_is_one_loader(in_process):
    # A new DataLoader each epoch, iterated by the same line: one loader, epochs 1, 2, 3, as
    # one DataLoader iterated three times would be (else each epoch is a loader of its own,
    # too short to judge). Loaders iterated from other lines, or at the same time, or
    # configured otherwise, stay apart.
    from torch.utils.data import DataLoader

    for _ in range(3):
        assert [b.tolist() for b in DataLoader(list(range(6)), batch_size=2)] == [
            [0, 1],
            [2, 3],
            [4, 5],
        ]
    assert _epoch(list(range(4))) == [[0, 1], [2, 3]]  # the same helper from two places:
    assert _epoch(list(range(2))) == [[0, 1]]  # training and validation
    for _ in range(2):  # two loaders of one line iterated side by side (zip): two loaders
        pairs = zip(*[DataLoader(list(range(4)), batch_size=k) for k in (2, 2)])
        assert [(a.tolist(), b.tolist()) for a, b in pairs] == [([0, 1], [0, 1]), ([2, 3], [2, 3])]
        del pairs  # zip stopped at the first's end: the second's epoch ends when it goes
    for workers in (0, 1):  # the same line with another configuration: another loader
        assert sum(len(b) for b in DataLoader(list(range(4)), num_workers=workers)) == 4
    held = []
    for pause in (main.LOOP_IDLE_NS / 1e9 + 0.1, 0, 0):
        # Left after a batch but held (Lightning's sanity check): done with once idle for
        # LOOP_IDLE_NS, as the second is; the third comes while the second was just used.
        it = iter(DataLoader(list(range(8)), batch_size=2, num_workers=1))
        assert next(it).tolist() == [0, 1]
        held.append(it)
        if pause:
            time.sleep(pause)
    starts = [Event(*e) for e in in_process.drain() if e[0] == K.K_ITER_START]
    ids = [e.loader for e in starts]
    assert len(set(ids)) == 1 + 2 + 2 + 2 + 2, str(ids)
    assert ids[:3] == [ids[0]] * 3 and [e.v3 for e in starts[:3]] == [1, 2, 3]  # epochs
    assert len(set(ids[3:5])) == 2 and ids[0] not in ids[3:5]
    zipped = ids[5:9]  # each zip's two loaders are two ids; the second zip goes on from the first
    assert zipped[0] != zipped[1] and zipped[:2] == zipped[2:]
    assert len(set(ids[9:11])) == 2 and not set(ids[9:11]) & set(ids[:9])
    h = ids[11:]
    assert h[0] == h[1] != h[2] and not set(h) & set(ids[:11])
    del held


def test_thread_facts_recorded_at_iterator_creation(job):
    rec = next(r for r in job.side if r.get("type") == "iter_start")
    assert rec["threads"]["active"] >= 1 and "MainThread" in rec["threads"]["non_daemon"]
    assert rec["start_method"] == "fork"


def test_in_process_single_process_loader(in_process):
    from torch.utils.data import DataLoader

    data = [torch.arange(3) + i for i in range(6)]
    got = [b.tolist() for b in DataLoader(data, batch_size=2)]
    assert got == [[[0, 1, 2], [1, 2, 3]], [[2, 3, 4], [3, 4, 5]], [[4, 5, 6], [5, 6, 7]]]
    evs = [Event(*e) for e in in_process.drain()]
    kinds = [e.kind for e in evs]
    assert kinds.count(K.K_WORKER_BATCH) == 3 and kinds.count(K.K_MAIN_BATCH) == 3
    assert kinds[0] == K.K_ITER_START and kinds[-1] == K.K_ITER_END
    sizes = [e.v3 for e in evs if e.kind == K.K_WORKER_BATCH]
    assert sizes[0] == 48 and set(sizes) <= {48, -1}


def test_a_fast_single_process_loop_is_a_sample_with_exact_counts(tmp_path):
    from torch.utils.data import DataLoader

    ring = _ext.EventRing.create(str(tmp_path / "events.ring"), 1 << 18)
    n = 100_000  # batch_size 8 of ints: tens of thousands of batches a second
    loader = DataLoader(list(range(8 * n)), batch_size=8)
    plain = [b.sum().item() for b in DataLoader(list(range(8 * n)), batch_size=8)]
    assert hooks.install(ring.path, str(tmp_path))
    try:
        t0 = time.monotonic()
        watched = [b.sum().item() for b in loader]
        rate = n / (time.monotonic() - t0)
        again = [b.sum().item() for b in loader]  # the next epoch starts sampled
    finally:
        hooks.uninstall()
    evs = [Event(*e) for e in ring.drain()]
    ring.close()
    assert watched == plain == again
    ends = [e for e in evs if e.kind == K.K_ITER_END]
    assert [(e.index, e.v0) for e in ends] == [(n, K.END_EXHAUSTED)] * 2
    for epoch, end in enumerate(ends):
        lo = ends[epoch - 1].t_ns if epoch else 0
        mine = [e for e in evs if lo < e.t_ns <= end.t_ns]
        handouts = [e for e in mine if e.kind == K.K_MAIN_BATCH]
        fetches = [e for e in mine if e.kind == K.K_WORKER_BATCH]
        if rate > 20_000:  # a sample (unless a crowded machine slowed the loop down)
            assert len(handouts) < n / 4 and len(fetches) < n / 4
        assert sum(max(e.weight, 1) for e in handouts) + end.v3 == n  # every batch counted
        assert sum(max(e.weight, 1) for e in fetches) + end.v2 == n
        assert handouts[0].index == 0 and handouts[0].v1 == -1 and handouts[0].weight == 1
        # a measured hand-out and its fetch are the same batch
        by_index = {e.index: e for e in fetches}
        paired = [m for m in handouts if m.index in by_index]
        assert len(paired) >= len(handouts) * 0.9
        assert all(m.v0 >= by_index[m.index].v0 for m in paired)
    assert any(e.weight > 1 for e in evs if e.kind == K.K_MAIN_BATCH)


def test_a_fast_loader_with_workers_hands_out_a_sample_with_exact_counts(tmp_path):
    # A loader with workers past 500 batches a second has its hand-outs measured as a sample,
    # each batch still counted, and the next batch due noted at every hand-out for the hang
    # doctor (the ring's progress table), measured or not.
    from torch.utils.data import DataLoader

    ring = _ext.EventRing.create(str(tmp_path / "events.ring"), 1 << 18)
    n = 3000  # batch_size 8 of ints, 2 workers: about a thousand batches a second
    data = list(range(8 * n))
    plain = [b.sum().item() for b in DataLoader(data, batch_size=8, num_workers=2)]
    assert hooks.install(ring.path, str(tmp_path))
    try:
        loader = DataLoader(data, batch_size=8, num_workers=2)
        t0 = time.monotonic()
        watched = [b.sum().item() for b in loader]
        rate = n / (time.monotonic() - t0)
        it = iter(loader)
        half = [next(it).sum().item() for _ in range(n // 2)]
        so_far = [Event(*e) for e in ring.drain()]
        (start,) = [e for e in so_far if e.kind == K.K_ITER_START][1:]
        assert ring.progress(start.loader, start.v3) == n // 2  # batch n/2 is due next
        assert ring.progress(start.loader, start.v3 - 1) == -1  # the slot is this epoch's now
        del it
        gc.collect()
    finally:
        hooks.uninstall()
    evs = so_far + [Event(*e) for e in ring.drain()]
    ring.close()
    assert watched == plain and half == plain[: n // 2]
    ends = [e for e in evs if e.kind == K.K_ITER_END]
    assert [(e.index, e.v0) for e in ends] == [(n, K.END_EXHAUSTED), (n // 2, K.END_SHUTDOWN)]
    first_end = ends[0].t_ns
    for end, mine in (
        (ends[0], [e for e in evs if e.t_ns <= first_end]),
        (ends[1], [e for e in evs if e.t_ns > first_end]),
    ):
        handouts = [e for e in mine if e.kind == K.K_MAIN_BATCH]
        assert sum(max(e.weight, 1) for e in handouts) + end.v3 == end.index  # each counted
        assert end.v2 == 0  # the workers count their own fetches
        assert handouts[0].index == 0 and handouts[0].v1 == -1 and handouts[0].weight == 1
        assert all(e.worker == e.index % 2 for e in handouts)  # in order: batch i, worker i % 2
        assert all(e.v0 >= 0 for e in handouts)  # the wait of each measured one
    main = [e for e in evs if e.kind == K.K_MAIN_BATCH and e.t_ns <= first_end]
    if rate > 800:  # a sample (unless a crowded machine slowed the loop down)
        assert len(main) < n / 3
        assert any(e.weight > 1 for e in main)


def _epochs(evs):
    """Each epoch's events (its loader's, kIterStart .. kIterEnd) with its end event, in the
    order the epochs ended."""
    out, open_ = [], {}
    for e in evs:
        if e.kind == K.K_ITER_START:
            open_[e.loader] = []
        elif e.loader in open_:
            open_[e.loader].append(e)
            if e.kind == K.K_ITER_END:
                out.append((open_.pop(e.loader), e))
    return out


def _counted(mine, end, kind):
    return sum(max(e.weight, 1) for e in mine if e.kind == kind) + (
        end.v3 if kind == K.K_MAIN_BATCH else end.v2
    )


def test_fast_loops_cut_short_or_zipped_count_every_batch(tmp_path):
    # A fast loop's unmeasured hand-outs are counted a run at a time: a loop left mid-run
    # (its iterator dies, the next one likely at the same address), two fast loaders zipped
    # (their hand-outs alternate) and a loop restarted each count every batch of each epoch.
    from torch.utils.data import DataLoader

    ring = _ext.EventRing.create(str(tmp_path / "events.ring"), 1 << 18)
    n = 40_000
    a = DataLoader(list(range(8 * n)), batch_size=8)
    b = DataLoader(list(range(8 * n)), batch_size=8)
    assert hooks.install(ring.path, str(tmp_path))
    try:
        sums = []
        for cut in (12_345, 23_456):
            it = iter(a)
            sums.append(sum(next(it).sum().item() for _ in range(cut)))
            del it
        zipped = sum(x.sum().item() + y.sum().item() for x, y in zip(a, b))
        full = sum(x.sum().item() for x in a)
    finally:
        hooks.uninstall()
    evs = [Event(*e) for e in ring.drain()]
    ring.close()
    first = lambda k: sum(range(8 * k))  # noqa: E731
    assert sums == [first(12_345), first(23_456)]
    assert zipped == 2 * first(n) == 2 * full
    epochs = _epochs(evs)
    assert [(end.index, end.v0) for _, end in epochs] == [
        (12_345, K.END_SHUTDOWN),
        (23_456, K.END_SHUTDOWN),
        (n, K.END_EXHAUSTED),  # a: zip() asks it first
        (n, K.END_SHUTDOWN),  # b: never asked past its last batch
        (n, K.END_EXHAUSTED),
    ]
    for mine, end in epochs:
        assert _counted(mine, end, K.K_MAIN_BATCH) == end.index
        assert _counted(mine, end, K.K_WORKER_BATCH) == end.index


class SlowsDown(torch.utils.data.Dataset):
    """Tens of thousands of tiny batches a second, then batches of 5 ms."""

    def __init__(self, fast: int, slow: int):
        self.fast, self.n = fast, fast + slow

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i >= self.fast:
            time.sleep(0.005)
        return i


@pytest.mark.alone  # timed in tens of ms
def test_a_fast_loop_that_slows_down_is_measured_again_within_tens_of_ms(tmp_path):
    # A loop sampled at tens of thousands of batches a second slows to 5 ms a batch. Its
    # unmeasured hand-outs go a run at a time, each run planned at the rate so far; a run
    # looks at the clock every 16 hand-outs, so measuring resumes within a few dozen slow
    # ones (not after the hundreds planned at the fast rate), goes on at least every 16th,
    # and takes every one once the rate window has seen the slowdown.
    from torch.utils.data import DataLoader

    ring = _ext.EventRing.create(str(tmp_path / "events.ring"), 1 << 18)
    fast, slow = 60_000, 120
    loader = DataLoader(SlowsDown(fast, slow), batch_size=None)
    assert hooks.install(ring.path, str(tmp_path))
    try:
        t0 = time.monotonic()
        got = [int(x) for x in loader]
        elapsed = time.monotonic() - t0
    finally:
        hooks.uninstall()
    evs = [Event(*e) for e in ring.drain()]
    ring.close()
    assert got == list(range(fast + slow))
    measured = {e.index for e in evs if e.kind == K.K_MAIN_BATCH}
    fast_s = max(elapsed - slow * 0.005, 1e-3)
    if fast / fast_s > 20_000:  # sampled (unless a crowded machine slowed the loop down)
        assert len([i for i in measured if i < fast]) < fast / 4
    late = [i for i in range(fast, fast + slow) if i in measured]
    assert late and late[0] <= fast + 32, late
    assert max(b - a for a, b in zip(late, late[1:])) <= 17, late
    # Two rate windows (100 ms each, closed at a measured one) after the slowdown: 62 at most.
    assert late[-40:] == list(range(fast + slow - 40, fast + slow)), late


def _inline_attributes(obj) -> bool:
    """The interpreter keeps obj's attributes as inline values, not a dict (CPython 3.11+:
    a dict, once made by vars() or a __class__ assignment, stays, and its attribute loads
    miss the specializing interpreter's cache). gc.get_referents makes no dict. Before 3.11
    every instance has its dict from the start: nothing to check."""
    if sys.version_info < (3, 11):
        return True
    return not any(type(r) is dict for r in gc.get_referents(obj))


def test_a_single_process_fetcher_keeps_its_class_and_inline_attributes(in_process):
    """The hooks never reshape torch's objects: a single-process iterator's fetcher keeps
    torch's class and its attributes inline, an unmeasured fetch passes through the fetch
    hook, and a measured hand-out's fetch is the one that has a fetch event. Values, order
    and exceptions stay torch's."""
    from torch.utils.data import DataLoader, IterableDataset
    from torch.utils.data._utils.fetch import _IterableDatasetFetcher, _MapDatasetFetcher

    n = 20_000

    class Probe(torch.utils.data.Dataset):  # batch_size 1: sample i is batch i
        def __len__(self):
            return n

        def __getitem__(self, i):
            return i

    it = iter(DataLoader(Probe(), batch_size=1))
    assert [int(b) for b in it] == list(range(n))
    assert type(it._dataset_fetcher) is _MapDatasetFetcher
    assert _inline_attributes(it._dataset_fetcher) and _inline_attributes(it)
    evs = [Event(*e) for e in in_process.drain()]
    handed = {e.index for e in evs if e.kind == K.K_MAIN_BATCH}
    measured = {e.index for e in evs if e.kind == K.K_WORKER_BATCH}
    assert 0 in measured and measured == handed  # a fetch is timed exactly when its hand-out is
    (end,) = [e for e in evs if e.kind == K.K_ITER_END]
    fetches = [e for e in evs if e.kind == K.K_WORKER_BATCH]
    assert sum(max(e.weight, 1) for e in fetches) + end.v2 == n  # every fetch counted

    class Bad(torch.utils.data.Dataset):  # raises in the first, measured, fetch
        def __len__(self):
            return 4

        def __getitem__(self, i):
            raise KeyError(f"sample {i}")

    bad = iter(DataLoader(Bad(), batch_size=2))
    with pytest.raises(KeyError, match="sample 0"):
        next(bad)
    assert type(bad._dataset_fetcher) is _MapDatasetFetcher

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(10))

    it = iter(DataLoader(Stream(), batch_size=4))
    assert [b.tolist() for b in it] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert type(it._dataset_fetcher) is _IterableDatasetFetcher
    assert _inline_attributes(it._dataset_fetcher)


def test_unwatched_iterators_pass_through(in_process):
    from torch.utils.data import DataLoader

    it = iter(DataLoader(list(range(4)), batch_size=2))
    main.ITERS.states.clear()  # as for an iterator created before install()
    _ext.batch_context.forget_states()
    assert [b.tolist() for b in it] == [[0, 1], [2, 3]]
    assert not [e for e in in_process.drain() if e[0] in (K.K_MAIN_BATCH, K.K_WORKER_BATCH)]


def test_pin_memory_time_is_measured_once_per_batch(in_process):
    pin = torch.utils.data._utils.pin_memory.pin_memory
    assert pin.__dldoctor_orig__ is not None

    class Pinnable:  # what pin_memory() calls on objects that know how to pin themselves
        def pin_memory(self):
            return self

    batch = [Pinnable(), {"a": Pinnable(), "b": (Pinnable(), "text")}]
    main.PINS.pending.clear()
    out = pin(batch)
    assert out == batch and out is not batch  # PyTorch copies the containers
    assert list(main.PINS.pending) == [id(out)]  # the outer call only, not each element
    assert main.PINS.pending[id(out)] > 0
    main.PINS.pending.clear()


def test_an_abandoned_iterator_ends_its_epoch(in_process):
    from torch.utils.data import DataLoader

    for workers in (0, 1):
        context = "fork" if workers else None
        loader = DataLoader(
            list(range(40)), batch_size=4, num_workers=workers, multiprocessing_context=context
        )
        it = iter(loader)
        assert [next(it).tolist() for _ in range(3)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
        del it  # dropped mid-epoch
        assert sum(len(b) for b in loader) == 40  # the next epoch is whole
    evs = [Event(*e) for e in in_process.drain()]
    ends = [(e.index, e.v0, e.v1) for e in evs if e.kind == K.K_ITER_END]
    assert sorted(ends) == sorted([(3, K.END_SHUTDOWN, 1), (10, K.END_EXHAUSTED, 2)] * 2)


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
    handouts = [e for e in run.events if e.kind == K.K_MAIN_BATCH]
    assert [e.index for e in handouts] == [0, 1, 2] and {e.pid for e in handouts} == {pid}
    assert os.getpid() != pid


STOPPED_MID_EPOCH = """
from torch.utils.data import DataLoader
it = iter(DataLoader(list(range(8 * 200_000)), batch_size=8))
for _ in range(100_000):
    next(it)
print("handed out 100000")  # and exits with the iterator alive, mid-epoch
"""


def test_a_loop_stopped_mid_epoch_still_counts_every_batch(tmp_path):
    script = tmp_path / "stopped.py"
    script.write_text(STOPPED_MID_EPOCH)
    run = run_watched([sys.executable, str(script)], tmp_path / "run", capacity=1 << 18)
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    (end,) = [e for e in run.events if e.kind == K.K_ITER_END]
    assert (end.index, end.v0) == (100_000, K.END_SHUTDOWN)  # ended at exit, tails included
    handouts = [e for e in run.events if e.kind == K.K_MAIN_BATCH]
    fetches = [e for e in run.events if e.kind == K.K_WORKER_BATCH]
    assert sum(max(e.weight, 1) for e in handouts) + end.v3 == 100_000
    assert sum(max(e.weight, 1) for e in fetches) + end.v2 == 100_000


SHORT_EPOCHS = """
import time
from torch.utils.data import DataLoader, Dataset
class Short(Dataset):
    def __len__(self): return 16
    def __getitem__(self, i): return i
loader = DataLoader(Short(), batch_size=8)
t = time.monotonic()
epochs = 0
while epochs < 300 or time.monotonic() - t < 1.3:
    for _ in loader:
        pass
    epochs += 1
print(epochs)
"""


def test_short_single_process_epochs_each_start_but_are_noted_once_a_second(tmp_path):
    # Every epoch of a num_workers=0 loader emits kIterStart (the rules count epochs from
    # it); its side-log note, which says the same each epoch, is written at most once a
    # second after the first, so many short epochs do not pay ~40 us each for it.
    script = tmp_path / "short.py"
    script.write_text(SHORT_EPOCHS)
    run = run_watched([sys.executable, str(script)], tmp_path / "run", capacity=1 << 18)
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    epochs = int(run.proc.stdout)
    starts = [e for e in run.events if e.kind == K.K_ITER_START]
    assert [s.v3 for s in starts] == list(range(1, epochs + 1))
    noted = [r["epoch"] for r in run.side if r.get("type") == "iter_start"]
    assert noted[0] == 1 and 2 <= len(noted) <= 4, noted  # 1.3 s or more: 2 or 3 notes
    ends = [e for e in run.events if e.kind == K.K_ITER_END]
    assert len(ends) == epochs and all(e.v0 == K.END_EXHAUSTED for e in ends)


FAILS_DEEP_IN_A_FAST_LOOP = """
import sys
from torch.utils.data import DataLoader, Dataset, Sampler
BAD = 8 * 60_000 + 5  # tens of thousands of batches in: far past the measured warm-up
class Ints(Dataset):
    def __len__(self): return 8 * 100_000
    def __getitem__(self, i):
        if i == BAD:
            raise ValueError(f"bad sample {i}")
        return i
class Broken(Sampler):
    def __len__(self): return 4
    def __iter__(self):
        yield 0
        raise KeyError("sampler broke")
seen = 0
try:
    for _ in DataLoader(Ints(), batch_size=8):
        seen += 1
except ValueError as e:
    print(seen, e, file=sys.stderr)
try:
    for _ in DataLoader(Ints(), sampler=Broken(), batch_size=None):
        pass
except KeyError as e:
    print("sampler", e, file=sys.stderr)
"""


def test_a_single_process_fetch_error_names_its_samples_measured_or_not(tmp_path):
    # A fast loop measures a sample of its batches; the one that raises is named with its
    # indices all the same (read from torch's fetch frame in the traceback), and an error
    # raised outside the fetch (the sampler) is the loader's, not a fetch's.
    script = tmp_path / "fails.py"
    script.write_text(FAILS_DEEP_IN_A_FAST_LOOP)
    run = run_watched([sys.executable, str(script)], tmp_path / "run", capacity=1 << 18)
    assert run.proc.returncode == 0, run.proc.stderr[-3000:]
    assert "60000 bad sample 480005" in run.proc.stderr
    assert "sampler 'sampler broke'" in run.proc.stderr
    (rec,) = [r for r in run.side if r.get("type") == "worker_exception"]
    assert (rec["worker"], rec["index"]) == (-1, 60_000)
    assert rec["samples"] == list(range(480_000, 480_008))
    assert rec["exc_type"] == "builtins.ValueError" and rec["message"] == "bad sample 480005"
    assert "in __getitem__" in rec["traceback"] and "dldoctor/job" not in rec["traceback"]
    errors = [r for r in run.side if r.get("type") == "loader_error"]
    assert [r["exc_type"] for r in errors] == ["builtins.ValueError", "builtins.KeyError"]
    (exc,) = [e for e in run.events if e.kind == K.K_WORKER_EXCEPTION]
    assert (exc.worker, exc.index) == (-1, 60_000)
