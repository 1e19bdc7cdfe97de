"""dldoctor.job.worker on real DataLoaders: every start method's workers announce themselves
and measure each fetch (the C++ fetch, collate and index-queue hooks), the user's
worker_init_fn is chained, a fast worker's fetches are measured as a sample with exact
counts, and a batch's bytes are summed once per storage."""

from __future__ import annotations

import os
import pickle
import time
import traceback
from collections import namedtuple

import pytest

torch = pytest.importorskip("torch")

from _hooked_job import (  # noqa: E402
    BATCH_BYTES,
    Event,
    check_batches_match,
    events,
    hooked_job,
    loader_of,
)
from dldoctor.job import events as K  # noqa: E402
from dldoctor.job import install, worker  # noqa: E402


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return hooked_job(tmp_path_factory)


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
    exits = events(job, lid, K.K_WORKER_EXIT)
    assert sorted(e.worker for e in exits) == list(range(workers))
    assert sum(e.v0 for e in exits) == 4 and all(e.v2 == 0 for e in exits)  # none unmeasured
    check_batches_match(job, lid, 4, BATCH_BYTES)
    assert job.result[{1: "fork", 2: "spawn", 3: "forkserver"}[method]] == [
        [0, 1, 2, 3],
        [4, 5, 6, 7],
        [8, 9, 10, 11],
        [12, 13, 14, 15],
    ]


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
    assert "__getitem__" in rec["traceback"] and "dldoctor" not in rec["traceback"]
    assert rec["samples"] == [4, 5, 6, 7] and rec["index"] == 1  # the failing batch's indices
    assert job.result["raises"] == "ValueError: bad sample 6"


def test_worker_init_chains_the_users_function():
    seen = []
    wi = worker._WorkerInit(5, "/nonexistent", None, seen.append)
    clone = pickle.loads(pickle.dumps(worker._WorkerInit(5, "/r", "/d", len)))
    assert (clone.loader_id, clone.ring_path, clone.run_dir, clone.user_fn) == (5, "/r", "/d", len)
    assert b"dldoctor.job.worker" in pickle.dumps(wi)  # by name: spawned workers import it
    worker.CTX.worker_started = True  # as if the _worker_loop hook had run
    try:
        wi(3)
        assert seen == [3]

        def bad(worker_id):
            raise KeyError(f"no shard {worker_id}")

        with pytest.raises(KeyError, match="no shard 2") as e:
            worker._WorkerInit(5, None, None, bad)(2)
        frames = [f.name for f in traceback.extract_tb(e.value.__traceback__)]
        assert "__call__" not in frames and frames[-1] == "bad"
    finally:
        worker.CTX.worker_started = False


def test_batch_bytes_walks_structures_and_dedups_storages():
    Pair = namedtuple("Pair", "a b")
    t = torch.zeros(100, dtype=torch.float32)  # 400 bytes
    view = t[10:20]  # same storage
    u = torch.zeros(5, dtype=torch.int64)  # 40 bytes
    assert worker.batch_bytes(t) == 400
    assert worker.batch_bytes({"x": [t, view], "y": Pair(u, "name")}) == 440
    assert worker.batch_bytes(("no", "tensors", 3)) == 0
    many = [torch.zeros(1) for _ in range(worker.BYTES_MAX_ITEMS + 10)]
    assert worker.batch_bytes(many) == -1


def _be_worker(loader: int, worker_id: int) -> None:
    """This test process plays worker `worker_id` of `loader`: the fetch hooks a worker's
    begin() installs, and its context."""
    install.patch_fetchers()
    worker.CTX.begin_worker(loader, worker_id)


def test_only_a_worker_has_fetch_hooks(in_process):
    # The main process times a single-process fetch at its _next_data: no hook on the fetch.
    from torch.utils.data._utils.fetch import _IterableDatasetFetcher, _MapDatasetFetcher

    for cls in (_MapDatasetFetcher, _IterableDatasetFetcher):
        assert not hasattr(cls.__dict__["fetch"], "__dldoctor_orig__")
    install.patch_fetchers()
    for cls in (_MapDatasetFetcher, _IterableDatasetFetcher):
        assert cls.__dict__["fetch"].role == "fetch"


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


def test_a_fast_workers_fetches_are_a_sample_with_exact_counts(in_process):
    # Torch's own fetcher and collate, called as a worker's loop calls them, far faster than
    # any loader with workers delivers (tens of thousands a second).
    from torch.utils.data._utils.collate import default_collate
    from torch.utils.data._utils.fetch import _MapDatasetFetcher

    data = [torch.tensor([i, i]) for i in range(64)]
    fetcher = _MapDatasetFetcher(data, True, default_collate, False)
    _be_worker(9, 0)
    # At least 0.6 s of fetches: the first 0.1 s is measured in full (the rate window).
    got, t0 = [], time.monotonic()
    while len(got) < 60_000 or time.monotonic() - t0 < 0.6:
        got.extend(fetcher.fetch([i % 64, (i + 1) % 64]) for i in range(len(got), len(got) + 5000))
    n = len(got)
    rate = n / (time.monotonic() - t0)
    tail = worker.CTX.take_unmeasured()
    period = worker.CTX.sample_period()
    worker.CTX.loader = 0
    assert all(
        torch.equal(b, torch.stack([data[i % 64], data[(i + 1) % 64]])) for i, b in enumerate(got)
    )
    evs = [Event(*e) for e in in_process.drain() if e[0] == K.K_WORKER_BATCH]
    assert period > 1 and any(e.weight > 1 for e in evs)
    # Past the first 0.1 s, 1,000-2,000 measured a second (unless a crowded machine slows it)
    if rate > 20_000:
        assert len(evs) < n / 3
    assert sum(max(e.weight, 1) for e in evs) + tail == n  # every fetch is accounted for
    assert worker.CTX.worker_fetches() == n
    assert all(e.count == 2 and e.v0 >= e.v1 >= 0 for e in evs)
    assert any(e.weight > 1 for e in evs)
    measured = [e for e in evs if e.v3 >= 0]
    assert measured and all(e.v3 == 2 * 2 * 8 for e in measured)  # one 2x2 int64 tensor


def test_a_fetch_hook_is_invisible_to_the_caller(in_process):
    from torch.utils.data._utils.fetch import _MapDatasetFetcher

    install.patch_fetchers()
    hook = _MapDatasetFetcher.__dict__["fetch"]
    assert hook.role == "fetch" and hook.__dldoctor_orig__ is hook.original
    assert hook.__name__ == "fetch" and hook.__qualname__ == "_MapDatasetFetcher.fetch"

    class Broken(list):
        def __getitem__(self, i):
            raise IndexError(f"no sample {i}")

    fetcher = _MapDatasetFetcher(Broken([1, 2]), True, lambda b: b, False)
    _be_worker(9, 0)
    try:
        with pytest.raises(IndexError, match="no sample 0") as e:
            fetcher.fetch([0, 1])
    finally:
        worker.CTX.loader = 0
    names = [f.name for f in traceback.extract_tb(e.value.__traceback__)]
    assert names[-1] == "__getitem__" and not any(
        "dldoctor" in f.filename for f in traceback.extract_tb(e.value.__traceback__)
    )
    bound = fetcher.fetch  # bound like any method, called like one
    assert bound.__self__ is fetcher
    assert [Event(*x).kind for x in in_process.drain() if x[0] == K.K_WORKER_EXCEPTION] == [
        K.K_WORKER_EXCEPTION
    ]


def test_a_worker_whose_iterable_share_runs_out_says_so(job):
    # An even split: each worker's stream ends with the epoch, after its own batches.
    lid = loader_of(job, "Stream")
    drained = sorted(events(job, lid, K.K_WORKER_DRAINED), key=lambda e: e.worker)
    batches = {
        w: sum(e.weight for e in events(job, lid, K.K_WORKER_BATCH) if e.worker == w)
        for w in (0, 1)
    }
    assert [(e.worker, e.v0) for e in drained] == [(0, batches[0]), (1, batches[1])]
    # One shard for two workers: worker 1 runs out before its first batch, worker 0 after 4.
    lid = loader_of(job, "SelfBatched")
    drained = sorted(events(job, lid, K.K_WORKER_DRAINED), key=lambda e: e.worker)
    assert [(e.worker, e.v0, e.v1) for e in drained] == [(0, 4, 1), (1, 0, 1)]
    assert job.result["self_batched"] == [[3 * b, 3 * b + 1, 3 * b + 2] for b in range(4)]


def test_a_batch_the_dataset_made_itself_counts_as_one_item(job):
    # batch_size=None: collate_fn (default_convert) gets the dataset's own (x, y) item, whose
    # length 2 is not a count of samples.
    lid = loader_of(job, "SelfBatched")
    counts = {e.count for e in events(job, lid, K.K_WORKER_BATCH)}
    assert counts == {1}
