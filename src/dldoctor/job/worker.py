"""The worker side: how a DataLoader worker learns it is watched (worker_init_fn chained with
the picklable _WorkerInit, the _worker_loop hook), the worker's context (`CTX`, the C++
object the fetch hooks read on every batch), and the rare paths those hooks call back into:
a batch's bytes, an exception in the user's fetch, a slow fetch, the batch index read from
the worker loop's frame.

The per-batch work itself (fetch, collate and index-queue timing, the event) is C++
(`_ext.hot_method`): no Python frame runs per batch.
"""

from __future__ import annotations

import functools
import os
import sys

from .. import _ext
from . import failures, profiling, sidelog
from .events import K_WORKER_EXCEPTION, K_WORKER_EXIT, K_WORKER_START
from .process import JOB_DIR, PROCESS, hide_frame, note, proc_start_ns, register_stack_dump

# This process's batch-hook context: loader and worker of the fetches (loader 0: not
# watched), the batch index and epoch, the fetch streams' counts and sample.
CTX = _ext.batch_context

# Walking a batch to sum its tensors' bytes stops after this many items (leaves and
# containers) and reports -1 (unknown): a batch of thousands of small objects must not cost
# more than the batch itself.
BYTES_MAX_ITEMS = 512

# Sample indices kept in a slow_batch or worker_exception record.
SLOW_SAMPLES = 64


class _WorkerInit:
    """Chained into `worker_init_fn` while an iterator starts its workers: carries the loader
    id to the worker (picklable by name, so it works under spawn and forkserver), then calls
    the user's function with the same argument; the user's exceptions propagate unchanged."""

    __slots__ = ("loader_id", "ring_path", "run_dir", "user_fn", "threads")

    def __init__(self, loader_id, ring_path, run_dir, user_fn, threads=None):
        self.loader_id = loader_id
        self.ring_path = ring_path
        self.run_dir = run_dir
        self.user_fn = user_fn
        self.threads = threads  # dldoctor run --set worker_threads=N

    def __reduce__(self):
        return (
            _WorkerInit,
            (self.loader_id, self.ring_path, self.run_dir, self.user_fn, self.threads),
        )

    def __call__(self, worker_id):
        if not CTX.worker_started:
            # The _worker_loop hook did not run: this worker's interpreter was not
            # instrumented at startup (python -E, a custom executable). Hook it now; the
            # batch index then comes from the worker loop's frame.
            try:
                begin(self, worker_id)
                CTX.index_from_frame = True
            except Exception:
                pass
        fn = self.user_fn
        out = None
        if fn is not None:
            before = failures.nofile()
            try:
                out = fn(worker_id)
            except BaseException as e:
                hide_frame(e)
                raise
            finally:
                # The user's function changed this worker's own fd limit: fd_limit must quote
                # it, not the one the worker inherited.
                try:
                    after = failures.nofile()
                    if after != before:
                        note("process_limits", loader=self.loader_id, worker=worker_id, **after)
                except Exception:
                    pass
        if self.threads:
            # dldoctor run --set worker_threads=N: after torch's own set_num_threads(1) in the
            # worker loop and the user's init, before the first fetch.
            from .settings import set_worker_threads

            set_worker_threads(self.threads)
        return out


def find_worker_init(init_fn):
    for _ in range(4):  # DataPipes wrap it in functools.partial(_sharding_worker_init_fn, ...)
        if isinstance(init_fn, _WorkerInit):
            return init_fn
        if isinstance(init_fn, functools.partial) and init_fn.args:
            init_fn = init_fn.args[0]
        else:
            return None
    return None


class _IndexQueueProxy:
    """Stands in for a worker's index queue so the fetch hook knows which batch it serves:
    its `get` is a C++ hook that records the index (and counts persistent workers' epochs)."""

    __slots__ = ("_q", "get")

    def __init__(self, q):
        self._q = q
        self.get = _ext.hot_method("index_get", q.get)

    def __getattr__(self, name):
        return getattr(self._q, name)


def begin(wi: _WorkerInit, worker_id) -> None:
    """This process is worker `worker_id` of loader wi.loader_id: open the ring if this
    interpreter was not instrumented yet, reset the forked state, announce the worker."""
    wid = int(worker_id) if worker_id is not None else -1
    if PROCESS.emit is None and wi.ring_path:
        from .install import install  # a worker started without dldoctor's env

        install(wi.ring_path, wi.run_dir)
    elif PROCESS.run_dir is None and wi.run_dir:
        PROCESS.run_dir = wi.run_dir
        sidelog.configure(wi.run_dir)
    from .install import patch_fetchers

    patch_fetchers()  # before the worker's first fetch: the loop calls it after begin()
    CTX.begin_worker(wi.loader_id, wid)
    profiling.SCHEDULE.reset()  # forked: whether the parent could profile is not ours to know
    register_stack_dump()
    start_ns = proc_start_ns()
    if PROCESS.emit is not None:
        PROCESS.emit(K_WORKER_START, wi.loader_id, wid, -1, 0, 0, os.getppid(), start_ns)
    note("worker_start", loader=wi.loader_id, worker=wid, ppid=os.getppid(), proc_start_ns=start_ns)
    failures.worker_started(PROCESS.run_dir, wi.loader_id, wid)


def make_worker_loop(orig):
    code = getattr(orig, "__code__", None)
    names = code.co_varnames[: code.co_argcount] if code is not None else ()
    pos = {n: i for i, n in enumerate(names)}

    def arg(args, kwargs, name):
        if name in kwargs:
            return kwargs[name]
        i = pos.get(name)
        return args[i] if i is not None and i < len(args) else None

    def _worker_loop(*args, **kwargs):
        wi = None
        try:
            wi = find_worker_init(arg(args, kwargs, "init_fn"))
            if wi is not None:
                begin(wi, arg(args, kwargs, "worker_id"))
                q = arg(args, kwargs, "index_queue")
                if q is not None and "index_queue" in kwargs:
                    kwargs["index_queue"] = _IndexQueueProxy(q)
                elif q is not None and pos.get("index_queue", len(args)) < len(args):
                    args = list(args)
                    args[pos["index_queue"]] = _IndexQueueProxy(q)
                else:
                    CTX.index_from_frame = True
        except Exception as e:
            note("hook_error", where="worker_begin", error=f"{type(e).__name__}: {e}")
        if wi is None:
            return orig(*args, **kwargs)
        failed = 0
        try:
            return orig(*args, **kwargs)
        except BaseException as e:
            failed = 1
            hide_frame(e)
            raise
        finally:
            emit = PROCESS.emit
            if emit is not None:
                emit(
                    K_WORKER_EXIT,
                    CTX.loader,
                    CTX.worker,
                    -1,
                    0,
                    0,
                    CTX.worker_fetches(),
                    failed,
                    CTX.take_unmeasured(),
                )

    return _worker_loop


# -- What the fetch hook calls back into ------------------------------------------------------
_Tensor = None  # torch.Tensor, once torch is imported


def batch_bytes(batch) -> int:
    """Bytes of the tensors in a collated batch, each storage counted once; -1 unknown."""
    global _Tensor
    tensor = _Tensor
    if tensor is None:
        torch = sys.modules.get("torch")
        tensor = _Tensor = getattr(torch, "Tensor", None) if torch is not None else None
        if tensor is None:
            return -1
    cls = batch.__class__
    try:
        if cls is tensor:  # the common shapes first: one tensor, a short tuple/list of them
            return batch.untyped_storage().nbytes()
        if (cls is tuple or cls is list) and len(batch) <= 8:
            total = 0
            ptrs = []
            for o in batch:
                if o.__class__ is not tensor:
                    break
                st = o.untyped_storage()
                p = st.data_ptr()
                if p not in ptrs:
                    ptrs.append(p)
                    total += st.nbytes()
            else:
                return total
    except Exception:
        return -1
    total = 0
    seen = set()
    stack = [batch]
    budget = BYTES_MAX_ITEMS
    try:
        while stack:
            o = stack.pop()
            budget -= 1
            if budget < 0:
                return -1
            if isinstance(o, tensor):
                s = o.untyped_storage()
                p = s.data_ptr()
                if p not in seen:
                    seen.add(p)
                    total += s.nbytes()
            elif isinstance(o, (list, tuple)):  # namedtuples are tuples
                stack.extend(o)
            elif isinstance(o, dict):
                stack.extend(o.values())
            elif hasattr(o, "items") and hasattr(o, "values") and not isinstance(o, (str, bytes)):
                stack.extend(o.values())  # other Mappings (OrderedDict is a dict already)
    except Exception:
        return -1
    return total


def frame_index() -> int:
    """The batch index in the calling worker loop's frame (no index-queue proxy there). The
    fetch hook is C++, so the caller's frame is the worker loop itself."""
    try:
        return int(sys._getframe(1).f_locals.get("idx", -1))
    except Exception:
        return -1


def batch_samples(indices) -> list[int] | None:
    """The first SLOW_SAMPLES dataset indices of a fetch's argument (a batch's list of
    indices, or one index); None when they are not indices (an IterableDataset's Nones)."""
    try:
        if isinstance(indices, (list, tuple, range)):
            return [int(i) for i in indices[:SLOW_SAMPLES]]
        return [int(indices)]
    except Exception:
        return None


def batch_note(kind: str, loader: int, worker: int, idx: int, indices, **fields) -> None:
    """A side-log record about one fetch: whose batch it was and its first samples."""
    note(kind, loader=loader, worker=worker, index=idx, samples=batch_samples(indices), **fields)


_FETCH_FILE = os.path.join("_utils", "fetch.py")


def fetch_frame(tb):
    """The frame of torch's fetch that traceback `tb` passes through, else None (the exception
    was raised elsewhere: a sampler, pin_memory)."""
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name == "fetch" and code.co_filename.endswith(_FETCH_FILE):
            return tb.tb_frame
        tb = tb.tb_next
    return None


def on_fetch_error(
    e: BaseException, loader: int, worker: int, idx: int, t0: int, indices=None
) -> None:
    """The user's fetch of `indices` raised `e` (it then reaches the loader unchanged). In the
    main process (worker -1) the hook is the iterator's `_next_data`: the fetch and its
    indices are found in the traceback, and an exception raised outside the fetch is not
    recorded here."""
    try:
        if worker == -1 and indices is None:
            frame = fetch_frame(e.__traceback__)
            if frame is None:
                return
            indices = frame.f_locals.get("possibly_batched_index")
        emit = PROCESS.emit
        if emit is not None:
            emit(K_WORKER_EXCEPTION, loader, worker, idx, 0, t0, _ext.monotonic_ns() - t0)
        import traceback

        tb = e.__traceback__
        if (
            tb is not None
            and tb.tb_next is not None
            and tb.tb_frame.f_code.co_filename.startswith(JOB_DIR)
        ):
            tb = tb.tb_next  # start at the user's side, as the loader's own report does
        try:
            message = str(e)
        except Exception:
            message = "<unprintable>"
        text = "".join(traceback.format_exception(type(e), e, tb))
        batch_note(
            "worker_exception",
            loader,
            worker,
            idx,
            indices,
            epoch=CTX.epoch,
            exc_type=f"{type(e).__module__}.{type(e).__qualname__}",
            message=message[:4000],
            traceback=text[-16000:],
        )
    except Exception:
        pass


def on_slow_fetch(loader: int, worker: int, idx: int, fetch_ns: int, mean_ns: int, indices):
    """A fetch took far longer than this stream's mean: name its samples (straggler_worker)."""
    batch_note("slow_batch", loader, worker, idx, indices, fetch_ns=fetch_ns, mean_ns=mean_ns)
