"""Instruments torch.utils.data inside every process of a watched job.

Patches a few methods of PyTorch's loader machinery (never the user's dataset, sampler or
collate objects) so that iterators, batches and workers write 64-byte events into the shared
ring (`_ext.trace_emit`), and rare string-bearing facts into the side log (`_sidelog`).
Installed by the injected `sitecustomize` right after `torch.utils.data.dataloader` is
imported, or directly by `dldoctor.watch()`. Every hook is a pass-through when its iterator
or worker is not being watched, and never changes what the loader yields or raises.
"""

from __future__ import annotations

import faulthandler
import functools
import os
import re
import signal
import sys
import threading
import time
import weakref

from . import failures as _failure_hooks
from . import sidelog as _sidelog

# -- The event vocabulary (mirrors src/dldoctor_core/trace/event.hpp) -----------------------
K_ITER_START = 1
K_WORKER_BATCH = 2
K_MAIN_BATCH = 3
K_WORKER_START = 4
K_WORKER_EXIT = 5
K_WORKER_EXCEPTION = 6
K_ITER_END = 7
K_WORKER_DIED = 8

F_PIN_MEMORY = 1 << 0
F_PERSISTENT_WORKERS = 1 << 1
F_IN_ORDER = 1 << 2
F_ITERABLE_DATASET = 1 << 3
F_DROP_LAST = 1 << 4
F_CUSTOM_COLLATE = 1 << 5

# Bits of flags for kWorkerBatch.
B_PROFILED = 1 << 0  # the fetch ran under the sampling profiler: slower than usual

START_METHODS = {"fork": 1, "spawn": 2, "forkserver": 3}

# v0 of kIterEnd: why the epoch ended.
END_EXHAUSTED = 0  # StopIteration: every batch was handed out
END_SHUTDOWN = 1  # the iterator was shut down or dropped before the end (break, exception)
END_ERROR = 2  # creating the iterator failed

# -- Sampled profiling of the fetch (__getitem__ + collate) ---------------------------------
# Only every PROFILE_EVERY-th fetch of a process is a candidate, the first one at fetch
# PROFILE_FIRST (past warm-up: first reads, lazy imports). A profiled fetch runs about 2x
# slower and costs ~1 ms to summarise, so candidates are also spaced in time: at least
# PROFILE_MIN_INTERVAL_S apart, the spacing doubling after each profile up to
# PROFILE_MAX_INTERVAL_S. On a tiny-batch loader that is well under 0.5% of a worker; on a
# slow one (the case that needs names) the first profile still comes within a few fetches.
PROFILE_EVERY = 50
PROFILE_FIRST = 10
PROFILE_MIN_INTERVAL_S = 0.5
PROFILE_MAX_INTERVAL_S = 8.0
# Functions kept per profile: the top by self time and the top by cumulative time.
PROFILE_TOP = 8

# The costly details of a fetch, thread CPU time (a syscall, ~0.6 us on a VM, twice) and the
# bytes of the batch (a walk, 0.2-0.5 us), are measured on every fetch when the previous one
# took at least DETAIL_ALWAYS_NS (then they are < 0.5% of it), else on every
# DETAIL_SAMPLE_EVERY-th (-1 in between): a tiny-batch loader still gets them for hundreds of
# batches a second, at under 0.1 us a fetch, and big batches (the ones that fill /dev/shm)
# take long enough to be measured every time.
DETAIL_ALWAYS_NS = 250_000
DETAIL_SAMPLE_EVERY = 16

# A fetch slower than SLOW_FACTOR x this process's running mean (and at least SLOW_MIN_NS)
# is reported with its sample indices in the side log, so a straggler finding can name the
# samples. The mean is updated on the first SLOW_WARMUP fetches, then on every 16th (cheap
# on a tiny-batch loader); a process writes at most SLOW_MAX_RECORDS such records.
SLOW_FACTOR = 5
SLOW_MIN_NS = 10_000_000
SLOW_WARMUP = 64
SLOW_MAX_RECORDS = 256
SLOW_SAMPLES = 64  # sample indices kept per record

# Walking a batch to sum its tensors' bytes stops after this many items (leaves and
# containers) and reports -1 (unknown): a batch of thousands of small objects must not cost
# more than the batch itself.
BYTES_MAX_ITEMS = 512

# CUDA memory (peak, held between steps) is read at a batch handout at most this often, and
# only when the job itself has initialized CUDA: a note per second is enough to size a batch.
CUDA_MEMORY_EVERY_NS = 1_000_000_000

# Signal that makes a process append all its threads' Python stacks to
# <run_dir>/stack-<pid>.txt (the hang doctor sends it). Not SIGUSR2: PyTorch's c10
# FatalSignalHandler takes SIGUSR2 over (it uses it to make threads print C++ stacks when a
# fatal signal arrives), and torchelastic/SLURM use SIGUSR1/SIGUSR2 for preemption notices.
# A real-time signal is free in practice. Its default action is to terminate, so it must only
# be sent to pids that announced it in the side log ("process" records, key "stack_signal").
STACK_SIGNAL = int(getattr(signal, "SIGRTMAX", 64)) - 6

_THIS_FILE = __file__

# -- Process state ---------------------------------------------------------------------------
_lock = threading.RLock()
_installed = False
_ring_path: str | None = None
_run_dir: str | None = None
_emit = None  # _ext.trace_emit once a ring is open
_next_loader_id = None
_patches: list = []  # (owner, name, original, wrapper)
_missing: list = []  # hook points this torch does not have
_import_hook = None

# What the fetch hook attributes a batch to: [loader id (0 = not watched), worker id (-1 =
# main process), batch index (-1 unknown), epoch (workers only; 0 unknown)]. A worker sets it
# once (the index per batch, the epoch when persistent workers resume); the main process sets
# it around each single-process fetch.
_ctx = [0, -1, -1, 0]
_idx_from_frame = False  # no index-queue proxy in this worker: read `idx` from the caller
_collate = [0, 0]  # ns in collate_fn and sample count of the current fetch
_last_fetch = [1 << 62]  # wall ns of this process's previous fetch (first: "long")
_worker = {"loader": 0, "worker": -1, "batches": 0, "started": False}
_prof = [0, 0, int(PROFILE_MIN_INTERVAL_S * 1e9), False]  # fetches, next ok ns, spacing, off
_slow = [1 << 62, 0, 0, SLOW_MAX_RECORDS]  # cut ns, mean ns, fetches averaged, records left
_Tensor = None

# Main process, per iterator: id(iterator) -> _IterState (cleared when the iterator dies).
_iters: dict = {}
_loader_ids: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_loader_ids_fallback: dict = {}  # for loaders that cannot be weakly referenced or hashed
_loader_epochs: dict = {}  # loader id -> epochs started
_worker_pids: dict = {}  # pid -> (iterator state, worker id), for deaths seen by SIGCHLD
_pin_ns: dict = {}  # id(pinned batch) -> ns spent pinning it
_pin_local = threading.local()
_wait_hooked = [False]  # _get_data is hooked (else the main process's wait is unknown)
_current = [None]  # the _IterState whose _next_data is running (main thread)
PIN_PENDING_MAX = 1024  # pinned batches never handed out (epoch cut short) are forgotten

_stack = {"pid": 0, "file": None}
_cuda_next = [0]  # monotonic ns of the next CUDA memory reading (main process)

_monotonic_ns = time.monotonic_ns
_thread_time_ns = time.thread_time_ns


class _IterState:
    __slots__ = (
        "loader_id",
        "multiprocess",
        "epoch",
        "batches",
        "last_handout",
        "ended",
        "died",
        "ref",
        "wait_ns",
        "got_idx",
        "got_worker",
        "pid",
        "__weakref__",
    )

    def __init__(self, loader_id: int, multiprocess: bool):
        self.loader_id = loader_id
        self.pid = os.getpid()  # a forked child inherits this state but must not end it
        self.multiprocess = multiprocess
        self.epoch = 0
        self.batches = 0
        self.last_handout = 0
        self.ended = False
        self.died: set = set()
        self.ref = None
        # Filled by the _get_data hook during one _next_data call: ns blocked on the result
        # queue, and the index and worker of the last batch received.
        self.wait_ns = 0
        self.got_idx = -1
        self.got_worker = -1


# -- Helpers -----------------------------------------------------------------------------------
def _hide_frame(e: BaseException) -> None:
    """Drop the calling wrapper's own entry from e's traceback before a bare `raise`, so the
    user sees the same traceback as without dldoctor (Python >= 3.11; harmless before)."""
    tb = e.__traceback__
    if tb is not None and tb.tb_frame is sys._getframe(1):
        e.__traceback__ = tb.tb_next


def _note(kind: str, **fields) -> None:
    rec = {"type": kind}
    rec.update(fields)
    _sidelog.write(rec)


def _qualname(obj) -> str | None:
    if obj is None:
        return None
    try:
        target = obj.func if isinstance(obj, functools.partial) else obj
        mod = getattr(target, "__module__", None) or getattr(type(target), "__module__", "")
        name = getattr(target, "__qualname__", None) or type(target).__qualname__
        return f"{mod}.{name}" if mod else name
    except Exception:
        return None


def _type_name(obj) -> str | None:
    if obj is None:
        return None
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def _thread_facts() -> dict:
    threads = threading.enumerate()
    return {
        "active": threading.active_count(),
        "non_daemon": [t.name for t in threads if not t.daemon],
        "daemon": [t.name for t in threads if t.daemon],
    }


def _default_start_method() -> str | None:
    # Never call get_start_method() without allow_none: it would fix the default context and
    # make a later set_start_method() in the user's code fail.
    import multiprocessing as mp

    method = mp.get_start_method(allow_none=True)
    if method:
        return method
    default = getattr(getattr(mp.context, "_default_context", None), "_default_context", None)
    return getattr(default, "_name", None)


def _start_method(loader) -> str | None:
    try:
        ctx = getattr(loader, "multiprocessing_context", None)
        if ctx is None:
            return _default_start_method()
        name = getattr(ctx, "_name", None)
        if name:
            return name
        if isinstance(ctx, str):
            return ctx
        return ctx.get_start_method(allow_none=True) or _default_start_method()
    except Exception:
        return None


def _proc_start_ns() -> int:
    """This process's start on CLOCK_MONOTONIC (-1 unknown): a spawned worker's startup
    (interpreter, imports, unpickling the dataset) happens before any hook runs."""
    try:
        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        ticks = int(fields[19])  # field 22, starttime, counted after the ")"
        hz = os.sysconf("SC_CLK_TCK")
        boot_minus_mono = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()
        return ticks * 1_000_000_000 // hz - boot_minus_mono
    except Exception:
        return -1


def _register_stack_dump() -> None:
    """Let STACK_SIGNAL dump every thread's stack to <run_dir>/stack-<pid>.txt."""
    pid = os.getpid()
    if _run_dir is None or _stack["pid"] == pid:
        return
    try:
        path = os.path.join(_run_dir, f"stack-{pid}.txt")
        f = open(path, "a", encoding="utf-8")
        prev = signal.getsignal(STACK_SIGNAL)
        # chain=True calls the previous handler after the dump; with SIG_DFL that previous
        # handler is "terminate", so chain only to a real one.
        chain = prev not in (signal.SIG_DFL, signal.SIG_IGN)
        faulthandler.register(STACK_SIGNAL, file=f, all_threads=True, chain=chain)
        old = _stack["file"]
        _stack["pid"], _stack["file"] = pid, f  # keep f open: faulthandler writes to its fd
        if old is not None:
            try:
                old.close()
            except Exception:
                pass
        _note(
            "process",
            ppid=os.getppid(),
            stack_signal=STACK_SIGNAL,
            stack_file=path,
            argv=sys.argv[:16],
        )
    except Exception as e:
        _note("hook_error", where="stack_dump", error=f"{type(e).__name__}: {e}")


def _after_fork_in_child() -> None:
    # A forked child (a worker, mostly) inherits the parent's iterators, loader ids, stack
    # handler and file. The iterators and ids are the parent's to report; the stack file is
    # replaced by the child's own.
    _iters.clear()
    _worker_pids.clear()
    _pin_ns.clear()
    _loader_ids.clear()
    _loader_ids_fallback.clear()
    if _installed:
        _register_stack_dump()


# -- Worker side ---------------------------------------------------------------------------------
class _WorkerInit:
    """Chained into `worker_init_fn` while an iterator starts its workers: carries the loader
    id to the worker (picklable by name, so it works under spawn and forkserver), then calls
    the user's function with the same argument; the user's exceptions propagate unchanged."""

    __slots__ = ("loader_id", "ring_path", "run_dir", "user_fn")

    def __init__(self, loader_id, ring_path, run_dir, user_fn):
        self.loader_id = loader_id
        self.ring_path = ring_path
        self.run_dir = run_dir
        self.user_fn = user_fn

    def __reduce__(self):
        return (_WorkerInit, (self.loader_id, self.ring_path, self.run_dir, self.user_fn))

    def __call__(self, worker_id):
        if not _worker["started"]:
            # The _worker_loop hook did not run: this worker's interpreter was not
            # instrumented at startup (python -E, a custom executable). Hook it now.
            try:
                _late_worker_begin(self, worker_id)
            except Exception:
                pass
        fn = self.user_fn
        if fn is not None:
            try:
                return fn(worker_id)
            except BaseException as e:
                _hide_frame(e)
                raise
        return None


def _find_worker_init(init_fn):
    for _ in range(4):  # DataPipes wrap it in functools.partial(_sharding_worker_init_fn, ...)
        if isinstance(init_fn, _WorkerInit):
            return init_fn
        if isinstance(init_fn, functools.partial) and init_fn.args:
            init_fn = init_fn.args[0]
        else:
            return None
    return None


class _IndexQueueProxy:
    """Stands in for a worker's index queue so the fetch hook knows which batch it serves."""

    __slots__ = ("_q",)

    def __init__(self, q):
        self._q = q

    def get(self, *args, **kwargs):
        r = self._q.get(*args, **kwargs)
        if r.__class__ is tuple:
            _ctx[2] = r[0]
        elif r is not None:  # _ResumeIteration: persistent workers start the next epoch
            _ctx[3] += 1
        return r

    def __getattr__(self, name):
        return getattr(self._q, name)


def _worker_begin(wi: _WorkerInit, worker_id) -> None:
    global _run_dir
    wid = int(worker_id) if worker_id is not None else -1
    _worker.update(loader=wi.loader_id, worker=wid, batches=0, started=True)
    if _emit is None and wi.ring_path:
        install(wi.ring_path, wi.run_dir)
    elif _run_dir is None and wi.run_dir:
        _run_dir = wi.run_dir
        _sidelog.configure(wi.run_dir)
    _ctx[0], _ctx[1], _ctx[2], _ctx[3] = wi.loader_id, wid, -1, 1
    _prof[0], _prof[1], _prof[2] = 0, 0, int(PROFILE_MIN_INTERVAL_S * 1e9)  # forked: reset
    _slow[0], _slow[1], _slow[2], _slow[3] = 1 << 62, 0, 0, SLOW_MAX_RECORDS
    _last_fetch[0] = 1 << 62
    _register_stack_dump()
    start_ns = _proc_start_ns()
    if _emit is not None:
        _emit(K_WORKER_START, wi.loader_id, wid, -1, 0, 0, os.getppid(), start_ns)
    _note(
        "worker_start", loader=wi.loader_id, worker=wid, ppid=os.getppid(), proc_start_ns=start_ns
    )
    _failure_hooks.worker_started(_run_dir, wi.loader_id, wid)


def _late_worker_begin(wi: _WorkerInit, worker_id) -> None:
    global _idx_from_frame
    _idx_from_frame = True
    _worker_begin(wi, worker_id)


def _make_worker_loop(orig):
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
            wi = _find_worker_init(arg(args, kwargs, "init_fn"))
            if wi is not None:
                _worker_begin(wi, arg(args, kwargs, "worker_id"))
                q = arg(args, kwargs, "index_queue")
                if q is not None and "index_queue" in kwargs:
                    kwargs["index_queue"] = _IndexQueueProxy(q)
                elif q is not None and pos.get("index_queue", len(args)) < len(args):
                    args = list(args)
                    args[pos["index_queue"]] = _IndexQueueProxy(q)
                else:
                    global _idx_from_frame
                    _idx_from_frame = True
        except Exception as e:
            _note("hook_error", where="worker_begin", error=f"{type(e).__name__}: {e}")
        if wi is None:
            return orig(*args, **kwargs)
        failed = 0
        try:
            return orig(*args, **kwargs)
        except BaseException as e:
            failed = 1
            _hide_frame(e)
            raise
        finally:
            if _emit is not None:
                _emit(K_WORKER_EXIT, _ctx[0], _ctx[1], -1, 0, 0, _worker["batches"], failed)

    return _worker_loop


def _batch_bytes(batch) -> int:
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


def _timed_collate(fn):
    def collate(data):
        t = _monotonic_ns()
        try:
            return fn(data)
        except BaseException as e:
            _hide_frame(e)
            raise
        finally:
            _collate[0] = _monotonic_ns() - t
            try:
                _collate[1] = len(data)
            except Exception:
                _collate[1] = 1

    collate.__dldoctor_orig__ = fn
    return collate


_TIMED_COLLATE_CODE = _timed_collate(None).__code__


def _frame_idx() -> int:
    try:
        return int(sys._getframe(2).f_locals.get("idx", -1))
    except Exception:
        return -1


def _profile_due() -> bool:
    now = _monotonic_ns()
    if _prof[3] or now < _prof[1]:
        return False
    if sys.getprofile() is not None:  # the user is profiling: do not take their profiler
        return False
    _prof[1] = now + _prof[2]
    _prof[2] = min(_prof[2] * 2, int(PROFILE_MAX_INTERVAL_S * 1e9))
    return True


def _torch_threads() -> int | None:
    """torch's intra-op pool size now (PyTorch sets 1 in workers; user code may raise it)."""
    torch = sys.modules.get("torch")
    try:
        return int(torch.get_num_threads()) if torch is not None else None
    except Exception:
        return None


def _profile_record(profiler, loader, worker, idx, fetch_ns) -> None:
    rows = []
    for e in profiler.getstats():
        code = e.code
        if isinstance(code, str):
            if "_lsprof.Profiler" in code:
                continue
            name, loc = code, ""
        else:
            if code.co_filename == _THIS_FILE:
                continue
            name = getattr(code, "co_qualname", code.co_name)
            loc = f"{code.co_filename}:{code.co_firstlineno}"
        rows.append((e.inlinetime, e.totaltime, e.callcount, name, loc))
    by_self = sorted(rows, key=lambda r: r[0], reverse=True)[:PROFILE_TOP]
    by_cum = sorted(rows, key=lambda r: r[1], reverse=True)[:PROFILE_TOP]
    picked = {(r[3], r[4]): r for r in by_self + by_cum}
    functions = [
        {
            "name": n,
            "location": loc,
            "self_ms": round(s * 1e3, 4),
            "cumulative_ms": round(c * 1e3, 4),
            "calls": k,
        }
        for s, c, k, n, loc in sorted(picked.values(), key=lambda r: r[1], reverse=True)
    ]
    _note(
        "profile",
        loader=loader,
        worker=worker,
        epoch=_ctx[3],
        index=idx,
        fetch_ns=fetch_ns,
        profiled_fetches=1,
        functions=functions,
        torch_threads=_torch_threads(),
    )


def _make_fetch(orig):
    def fetch(self, possibly_batched_index):
        loader = _ctx[0]
        if loader == 0 or _emit is None:
            return orig(self, possibly_batched_index)
        try:
            cf = self.collate_fn
            if getattr(cf, "__code__", None) is not _TIMED_COLLATE_CODE:
                self.collate_fn = _timed_collate(cf)  # once per fetcher object
        except Exception:
            pass
        worker = _ctx[1]
        idx = _frame_idx() if _idx_from_frame else _ctx[2]
        _collate[0] = 0
        _collate[1] = 0
        n = _prof[0] = _prof[0] + 1
        profiler = None
        if n % PROFILE_EVERY == PROFILE_FIRST % PROFILE_EVERY and _profile_due():
            try:
                import _lsprof

                profiler = _lsprof.Profiler()
                profiler.enable()
            except Exception:
                _prof[3] = True  # another tool owns the profiler hook (3.12+): stop trying
                profiler = None
        detail = _last_fetch[0] >= DETAIL_ALWAYS_NS or n % DETAIL_SAMPLE_EVERY == 1
        t0 = _monotonic_ns()
        c0 = _thread_time_ns() if detail else 0
        try:
            data = orig(self, possibly_batched_index)
        except BaseException as e:
            if profiler is not None:
                profiler.disable()
            if isinstance(e, Exception) and not isinstance(e, StopIteration):
                _on_fetch_error(e, loader, worker, idx, t0)
            _hide_frame(e)
            raise
        c1 = _thread_time_ns() if detail else -1
        t1 = _monotonic_ns()
        if profiler is not None:
            profiler.disable()
        _last_fetch[0] = t1 - t0
        count = _collate[1] if _collate[1] else 1
        _emit(
            K_WORKER_BATCH,
            loader,
            worker,
            idx,
            count,
            t0,
            t1 - t0,
            _collate[0],
            c1 - c0 if detail else -1,
            _batch_bytes(data) if detail else -1,
            0 if profiler is None else B_PROFILED,
        )
        _worker["batches"] += 1
        d = t1 - t0
        if d > _slow[0]:
            _slow_fetch(loader, worker, idx, d, possibly_batched_index)
        elif n < SLOW_WARMUP or not n & 15:
            _slow_mean(d)
        if profiler is not None:
            try:
                _profile_record(profiler, loader, worker, idx, t1 - t0)
            except Exception:
                pass
        return data

    return fetch


def _slow_mean(d: int) -> None:
    s = _slow
    k = s[2] = s[2] + 1
    s[1] += (d - s[1]) // (k if k < 16 else 16)  # a running mean, then a moving one
    if k >= 8:
        s[0] = max(SLOW_FACTOR * s[1], SLOW_MIN_NS)


def _slow_fetch(loader, worker, idx, d, indices) -> None:
    s = _slow
    if s[3] <= 0:
        return
    s[3] -= 1
    try:
        if isinstance(indices, (list, tuple, range)):
            samples = [int(i) for i in indices[:SLOW_SAMPLES]]
        else:
            samples = [int(indices)]
    except Exception:
        samples = None
    _note(
        "slow_batch",
        loader=loader,
        worker=worker,
        index=idx,
        fetch_ns=d,
        mean_ns=s[1],
        samples=samples,
    )


def _on_fetch_error(e: BaseException, loader, worker, idx, t0) -> None:
    try:
        _emit(K_WORKER_EXCEPTION, loader, worker, idx, 0, t0, _monotonic_ns() - t0)
        import traceback

        tb = e.__traceback__
        if (
            tb is not None
            and tb.tb_next is not None
            and tb.tb_frame.f_code.co_filename == _THIS_FILE
        ):
            tb = tb.tb_next  # start at the user's side, as the loader's own report does
        try:
            message = str(e)
        except Exception:
            message = "<unprintable>"
        text = "".join(traceback.format_exception(type(e), e, tb))
        _note(
            "worker_exception",
            loader=loader,
            worker=worker,
            epoch=_ctx[3],
            index=idx,
            exc_type=f"{type(e).__module__}.{type(e).__qualname__}",
            message=message[:4000],
            traceback=text[-16000:],
        )
    except Exception:
        pass


# -- Main process side ---------------------------------------------------------------------------
def _loader_id(loader) -> int:
    try:
        lid = _loader_ids.get(loader)
        if lid is None:
            lid = _next_loader_id()
            _loader_ids[loader] = lid
        return lid
    except TypeError:  # not weakly referenceable or not hashable
        lid = _loader_ids_fallback.get(id(loader))
        if lid is None:
            lid = _loader_ids_fallback[id(loader)] = _next_loader_id()
        return lid


def _accelerator_available() -> bool:
    try:
        import torch

        return bool(torch.accelerator.is_available())
    except Exception:
        return False


def _emit_iter_start(st: _IterState, loader, multiprocess: bool) -> None:
    """kIterStart for a new epoch of `loader` plus its names in the side log."""
    st.epoch = _loader_epochs.get(st.loader_id, 0) + 1
    _loader_epochs[st.loader_id] = st.epoch
    st.batches = 0
    st.last_handout = 0
    st.ended = False
    num_workers = int(getattr(loader, "num_workers", 0) or 0)
    batch_size = getattr(loader, "batch_size", None)
    prefetch = getattr(loader, "prefetch_factor", None)
    pin_requested = bool(getattr(loader, "pin_memory", False))
    pin = pin_requested and _accelerator_available()
    persistent = bool(getattr(loader, "persistent_workers", False))
    in_order = bool(getattr(loader, "in_order", True))
    drop_last = bool(getattr(loader, "drop_last", False))
    iterable = getattr(loader, "_dataset_kind", 0) == 1
    collate_fn = getattr(loader, "collate_fn", None)
    custom_collate = True
    try:
        from torch.utils.data._utils import collate as _c

        custom_collate = collate_fn not in (_c.default_collate, _c.default_convert)
    except Exception:
        pass
    flags = (
        (F_PIN_MEMORY if pin else 0)
        | (F_PERSISTENT_WORKERS if persistent else 0)
        | (F_IN_ORDER if in_order else 0)
        | (F_ITERABLE_DATASET if iterable else 0)
        | (F_DROP_LAST if drop_last else 0)
        | (F_CUSTOM_COLLATE if custom_collate else 0)
    )
    method = _start_method(loader) if num_workers > 0 else None
    timeout = getattr(loader, "timeout", 0) or 0
    _emit(
        K_ITER_START,
        st.loader_id,
        num_workers,
        int(prefetch or 0),
        int(batch_size or 0),
        0,
        int(timeout * 1000),
        os.getpid(),
        START_METHODS.get(method, 0),
        st.epoch,
        flags,
    )
    batches_per_epoch = None
    if not iterable:
        try:
            batches_per_epoch = len(loader)
        except Exception:
            pass
    user_init = getattr(loader, "worker_init_fn", None)
    _note(
        "iter_start",
        loader=st.loader_id,
        epoch=st.epoch,
        iterator="multiprocess" if multiprocess else "single_process",
        dataset=_type_name(getattr(loader, "dataset", None)),
        dataset_kind="iterable" if iterable else "map",
        collate_fn=_qualname(collate_fn),
        custom_collate=custom_collate,
        sampler=_type_name(getattr(loader, "sampler", None)),
        batch_sampler=_type_name(getattr(loader, "batch_sampler", None)),
        worker_init_fn=_qualname(user_init),
        num_workers=num_workers,
        batch_size=batch_size,
        prefetch_factor=prefetch,
        pin_memory=pin_requested,
        pin_memory_effective=pin,
        persistent_workers=persistent,
        in_order=in_order,
        drop_last=drop_last,
        timeout=timeout,
        start_method=method,
        batches_per_epoch=batches_per_epoch,
        main_pid=os.getpid(),
        threads=_thread_facts(),
        **_failure_hooks.iter_start_facts(st.epoch == 1),
    )


def _note_dataset(st: _IterState, loader) -> None:
    """Once per loader: its dataset's large attributes and, under spawn/forkserver, the size
    it pickles to (both bounded in time; see _dataset_probe)."""
    try:
        from . import dataset_probe as _dataset_probe

        rec = _dataset_probe.dataset_record(loader, _start_method(loader))
        if rec is not None:
            _note("dataset", loader=st.loader_id, **rec)
    except Exception as e:
        _note("hook_error", where="dataset", error=f"{type(e).__name__}: {e}")


def _iter_end(st: _IterState, reason: int) -> None:
    if st.ended or st.pid != os.getpid():
        return
    st.ended = True
    emit = _emit
    if emit is not None:
        emit(K_ITER_END, st.loader_id, -1, st.batches, 0, 0, reason, st.epoch)


def _forget_iter(key: int, st: _IterState) -> None:
    try:
        if _iters.get(key) is st:
            del _iters[key]
        _iter_end(st, END_SHUTDOWN)
        for pid in [p for p, v in _worker_pids.items() if v[0] is st]:
            del _worker_pids[pid]
    except Exception:
        pass


def _iter_begin(it, loader, multiprocess: bool):
    if _emit is None:
        return None
    try:
        st = _IterState(_loader_id(loader), multiprocess)
        key = id(it)
        st.ref = weakref.ref(it, lambda _r, key=key, st=st: _forget_iter(key, st))
        _iters[key] = st
        _emit_iter_start(st, loader, multiprocess)
        if multiprocess and st.epoch == 1:
            _note_dataset(st, loader)
        return st
    except Exception as e:
        _note("hook_error", where="iter_begin", error=f"{type(e).__name__}: {e}")
        return None


def _make_single_init(orig):
    def __init__(self, loader, *args, **kwargs):
        st = _iter_begin(self, loader, False)
        try:
            orig(self, loader, *args, **kwargs)
        except BaseException as e:
            if st is not None:
                _iter_end(st, END_ERROR)
            _hide_frame(e)
            raise

    return __init__


def _make_multi_init(orig):
    def __init__(self, loader, *args, **kwargs):
        st = _iter_begin(self, loader, True)
        if st is None:
            return orig(self, loader, *args, **kwargs)
        user_fn = getattr(loader, "worker_init_fn", None)
        swapped = False
        try:
            loader.worker_init_fn = _WorkerInit(st.loader_id, _ring_path, _run_dir, user_fn)
            swapped = True
        except Exception:
            pass
        try:
            orig(self, loader, *args, **kwargs)
        except BaseException as e:
            _iter_end(st, END_ERROR)
            _hide_frame(e)
            raise
        finally:
            if swapped:
                try:
                    loader.worker_init_fn = user_fn
                except Exception:
                    pass
        try:
            pids = [w.pid for w in self._workers]
            for i, pid in enumerate(pids):
                _worker_pids[pid] = (st, i)
            _note("workers", loader=st.loader_id, epoch=st.epoch, pids=pids)
        except Exception:
            pass

    return __init__


def _make_reset(orig):
    def _reset(self, loader, *args, **kwargs):
        first_iter = kwargs.get("first_iter", args[0] if args else False)
        st = _iters.get(id(self))
        if st is not None and not first_iter:
            try:
                _iter_end(st, END_SHUTDOWN)  # the previous epoch was cut short
                _emit_iter_start(st, loader, True)
            except Exception:
                pass
        try:
            return orig(self, loader, *args, **kwargs)
        except BaseException as e:
            _hide_frame(e)
            raise

    return _reset


def _make_single_next(orig):
    def _next_data(self):
        st = _iters.get(id(self))
        if st is None:
            return orig(self)
        t0 = _monotonic_ns()
        saved = _ctx[0], _ctx[1], _ctx[2]
        _ctx[0], _ctx[1], _ctx[2] = st.loader_id, -1, st.batches
        _collate[1] = 0
        try:
            data = orig(self)
        except StopIteration as e:
            _iter_end(st, END_EXHAUSTED)
            _hide_frame(e)
            raise
        except BaseException as e:
            if isinstance(e, Exception):
                _on_loader_error(self, st, e)
            _hide_frame(e)
            raise
        finally:
            _ctx[0], _ctx[1], _ctx[2] = saved
        t1 = _monotonic_ns()
        last = st.last_handout
        _emit(
            K_MAIN_BATCH,
            st.loader_id,
            -1,
            st.batches,
            _collate[1],
            t0,
            t1 - t0,
            t0 - last if last else -1,
            _pin_ns.pop(id(data), -1) if _pin_ns else -1,
        )
        st.batches += 1
        st.last_handout = t1
        if t1 >= _cuda_next[0]:
            _cuda_next[0] = t1 + CUDA_MEMORY_EVERY_NS
            _failure_hooks.cuda_memory(st.loader_id)
        return data

    return _next_data


def _make_multi_next(orig):
    def _next_data(self):
        st = _iters.get(id(self))
        if st is None:
            return orig(self)
        t0 = _monotonic_ns()
        try:
            rcvd = self._rcvd_idx
            info = self._task_info.get(rcvd)  # a batch that arrived early waits here
            stashed = info[0] if info is not None and len(info) == 2 else -1
        except AttributeError:
            rcvd, stashed = None, -1
        st.wait_ns = 0
        st.got_idx = -1
        prev = _current[0]
        _current[0] = st
        try:
            data = orig(self)
        except StopIteration as e:
            _iter_end(st, END_EXHAUSTED)
            _hide_frame(e)
            raise
        except BaseException as e:
            if isinstance(e, Exception):
                _on_loader_error(self, st, e)
            _hide_frame(e)
            raise
        finally:
            _current[0] = prev
        t1 = _monotonic_ns()
        new_rcvd = getattr(self, "_rcvd_idx", None)
        if rcvd is not None and new_rcvd != rcvd:
            # In order: the batch handed out is the one just before the new receive index,
            # either just received or already waiting (stashed) when we were called.
            idx = new_rcvd - 1
            if st.got_idx == idx:
                worker = st.got_worker
            else:
                worker = stashed if idx == rcvd else -1
        else:  # in_order=False handed out whatever arrived
            idx, worker = st.got_idx, st.got_worker
        last = st.last_handout
        _emit(
            K_MAIN_BATCH,
            st.loader_id,
            worker,
            idx,
            0,
            t0,
            st.wait_ns if _wait_hooked[0] else -1,
            t0 - last if last else -1,
            _pin_ns.pop(id(data), -1) if _pin_ns else -1,
        )
        st.batches += 1
        st.last_handout = t1
        if t1 >= _cuda_next[0]:
            _cuda_next[0] = t1 + CUDA_MEMORY_EVERY_NS
            _failure_hooks.cuda_memory(st.loader_id)
        return data

    return _next_data


def _on_loader_error(it, st: _IterState, e: BaseException) -> None:
    """The loader raised `e` to the consumer: record its text, and any worker found dead (a
    killed worker can surface as another error first, e.g. a reset connection mid-receive)."""
    try:
        _failure_hooks.loader_error(st.loader_id, e)
        for i, w in enumerate(getattr(it, "_workers", None) or ()):
            try:
                if _exit_status(w) != (0, None):  # a clean exit (shutdown) is no death
                    _report_death(st, i, w, f"{type(e).__name__}: {e}")
            except Exception:
                pass
    except Exception:
        pass


_DEATH_PIDS = re.compile(r"\d+")


def _exit_status(w) -> tuple[int | None, int | None]:
    """(exit code, signal) of a dead worker without reaping it behind PyTorch's back."""
    popen = getattr(w, "_popen", None)
    code = getattr(popen, "returncode", None)
    if code is not None:
        return (code, None) if code >= 0 else (None, -code)
    try:
        res = os.waitid(os.P_PID, w.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except (OSError, AttributeError):
        return None, None
    if res is None:
        return None, None
    if res.si_code == os.CLD_EXITED:
        return res.si_status, None
    return None, res.si_status


def _report_death(st: _IterState, worker_id: int, w, message: str) -> None:
    if worker_id in st.died:
        return
    code, sig = _exit_status(w) if w is not None else (None, None)
    if code is None and sig is None and w is not None and w.is_alive():
        return
    st.died.add(worker_id)
    pid = getattr(w, "pid", None)
    if _emit is not None:
        _emit(
            K_WORKER_DIED,
            st.loader_id,
            worker_id,
            -1,
            0,
            0,
            -1 if code is None else code,
            0 if sig is None else sig,
            pid or 0,
        )
    sig_name = None
    if sig:
        try:
            sig_name = signal.Signals(sig).name
        except ValueError:
            sig_name = None
    _note(
        "worker_died",
        loader=st.loader_id,
        worker=worker_id,
        worker_pid=pid,
        exitcode=code,
        signal=sig,
        signal_name=sig_name,
        message=message[:2000],
        **_failure_hooks.death_facts(),
    )


def _on_death_error(it, e: BaseException) -> None:
    try:
        message = str(e)
        if "DataLoader worker" not in message:
            return
        pids = {int(p) for p in _DEATH_PIDS.findall(message.split(")", 1)[0])}
        if it is not None:
            st = _iters.get(id(it))
            if st is not None:
                for i, w in enumerate(getattr(it, "_workers", ())):
                    if w.pid in pids or not pids:
                        _report_death(st, i, w, message)
                return
        for pid in pids:  # seen by the SIGCHLD handler: find the iterator through the pid
            entry = _worker_pids.get(pid)
            if entry is None:
                continue
            st, i = entry
            it_obj = st.ref() if st.ref is not None else None
            workers = getattr(it_obj, "_workers", None) or ()
            w = workers[i] if i < len(workers) else None
            _report_death(st, i, w, message)
    except Exception:
        pass


def _make_get_data(orig):
    def _get_data(self):
        t = _monotonic_ns()
        try:
            r = orig(self)
        except BaseException as e:
            if isinstance(e, RuntimeError):  # a dead worker: record it, raise the same error
                _on_death_error(self, e)
            _hide_frame(e)
            raise
        st = _current[0]
        if st is not None and st.ref() is self:  # called from this iterator's _next_data
            st.wait_ns += _monotonic_ns() - t
            if r.__class__ is tuple and len(r) == 2:
                idx = st.got_idx = r[0]
                # Only AttributeError is caught: a broad except could swallow the worker-death
                # error PyTorch's SIGCHLD handler raises between any two bytecodes.
                try:
                    info = self._task_info.get(idx)  # before _next_data pops it
                except AttributeError:
                    info = None
                st.got_worker = info[0] if info else -1
        return r

    return _get_data


def _make_shutdown(orig):
    def _shutdown_workers(self, *args, **kwargs):
        try:
            return orig(self, *args, **kwargs)
        except BaseException as e:
            _hide_frame(e)
            raise
        finally:
            try:
                st = _iters.get(id(self))
                if st is not None and _current[0] is not st:  # in _next_data: StopIteration next
                    _iter_end(st, END_SHUTDOWN)
            except Exception:
                pass  # interpreter shutdown

    return _shutdown_workers


def _make_error_if_any_worker_fails(orig):
    def _error_if_any_worker_fails(*args, **kwargs):
        try:
            return orig(*args, **kwargs)
        except BaseException as e:
            if isinstance(e, RuntimeError):
                _on_death_error(None, e)
            _hide_frame(e)
            raise

    return _error_if_any_worker_fails


def _make_pin_memory(orig):
    def pin_memory(data, *args, **kwargs):
        if getattr(_pin_local, "depth", 0):  # pin_memory recurses through this module global
            return orig(data, *args, **kwargs)
        _pin_local.depth = 1
        t = _monotonic_ns()
        try:
            out = orig(data, *args, **kwargs)
        except BaseException as e:
            _hide_frame(e)
            raise
        finally:
            _pin_local.depth = 0
        if len(_pin_ns) >= PIN_PENDING_MAX:
            _pin_ns.clear()
        _pin_ns[id(out)] = _monotonic_ns() - t
        return out

    return pin_memory


# -- Patching ----------------------------------------------------------------------------------------
def _patch(owner, name: str, factory, where: str) -> None:
    if owner is None:
        _missing.append(where)
        return
    orig = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    if orig is None:
        _missing.append(f"{where}.{name}")
        return
    if getattr(orig, "__dldoctor_orig__", None) is not None:
        return  # already ours
    wrapper = factory(orig)
    functools.update_wrapper(wrapper, orig)  # same __module__/__qualname__: pickles by name
    wrapper.__dldoctor_orig__ = orig
    setattr(owner, name, wrapper)
    _patches.append((owner, name, orig, wrapper))


def _patch_torch(dl) -> None:
    """Apply every hook to a fully executed torch.utils.data.dataloader module."""
    mods = sys.modules
    worker = mods.get("torch.utils.data._utils.worker")
    fetch = mods.get("torch.utils.data._utils.fetch")
    pin = mods.get("torch.utils.data._utils.pin_memory")
    sig = mods.get("torch.utils.data._utils.signal_handling")
    single = getattr(dl, "_SingleProcessDataLoaderIter", None)
    multi = getattr(dl, "_MultiProcessingDataLoaderIter", None)
    _patch(single, "__init__", _make_single_init, "_SingleProcessDataLoaderIter")
    _patch(single, "_next_data", _make_single_next, "_SingleProcessDataLoaderIter")
    _patch(multi, "__init__", _make_multi_init, "_MultiProcessingDataLoaderIter")
    _patch(multi, "_reset", _make_reset, "_MultiProcessingDataLoaderIter")
    _patch(multi, "_next_data", _make_multi_next, "_MultiProcessingDataLoaderIter")
    _patch(multi, "_get_data", _make_get_data, "_MultiProcessingDataLoaderIter")
    _patch(multi, "_shutdown_workers", _make_shutdown, "_MultiProcessingDataLoaderIter")
    _patch(worker, "_worker_loop", _make_worker_loop, "worker")
    for cls_name in ("_MapDatasetFetcher", "_IterableDatasetFetcher"):
        _patch(getattr(fetch, cls_name, None), "fetch", _make_fetch, cls_name)
    _patch(pin, "pin_memory", _make_pin_memory, "pin_memory")
    _patch(sig, "_error_if_any_worker_fails", _make_error_if_any_worker_fails, "signal_handling")
    _wait_hooked[0] = any(o is multi and n == "_get_data" for o, n, _, _ in _patches)
    if _missing:
        torch = mods.get("torch")
        _note(
            "hooks",
            missing=sorted(set(_missing)),
            torch=getattr(torch, "__version__", None) if torch else None,
        )


def on_dataloader_imported(module) -> None:
    """Called right after torch.utils.data.dataloader has executed (import hook)."""
    with _lock:
        if _installed and _emit is not None:
            try:
                _patch_torch(module)
            except Exception as e:
                _note("hook_error", where="patch", error=f"{type(e).__name__}: {e}")


class _DataLoaderImportHook:
    """A sys.meta_path finder that lets torch.utils.data.dataloader load normally and
    instruments it as soon as it has executed (for watch() before torch is imported)."""

    TARGET = "torch.utils.data.dataloader"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_and_patch(module):
            exec_module(module)
            on_dataloader_imported(module)

        try:
            loader.exec_module = exec_and_patch  # this spec's own loader instance
        except Exception:
            return spec
        return spec


def install(ring_path: str | None = None, run_dir: str | None = None) -> bool:
    """Instrument torch.utils.data in this process, writing to the ring at ring_path
    (default: $DLDOCTOR_RING) and side logs under run_dir (default: $DLDOCTOR_RUN_DIR).
    Idempotent; patches now if the loader module is loaded, else as soon as it is imported.
    False (and nothing patched) when no ring is configured or it cannot be opened."""
    global _installed, _ring_path, _run_dir, _emit, _next_loader_id, _import_hook
    ring_path = ring_path or os.environ.get("DLDOCTOR_RING")
    run_dir = run_dir or os.environ.get("DLDOCTOR_RUN_DIR")
    if not ring_path:
        return False
    with _lock:
        _run_dir = run_dir
        _sidelog.configure(run_dir)
        try:
            from .. import _ext

            _ext.trace_open(ring_path)
        except Exception as e:
            _note("hook_error", where="trace_open", error=f"{type(e).__name__}: {e}")
            return False
        _ring_path = ring_path
        _emit = _ext.trace_emit
        _next_loader_id = _ext.trace_next_loader_id
        if not _installed:
            _installed = True
            try:
                os.register_at_fork(after_in_child=_after_fork_in_child)
            except Exception:
                pass
        _register_stack_dump()
        _failure_hooks.install_excepthook()
        dl = sys.modules.get("torch.utils.data.dataloader")
        if dl is not None and hasattr(dl, "_MultiProcessingDataLoaderIter"):
            try:
                _patch_torch(dl)
            except Exception as e:
                _note("hook_error", where="patch", error=f"{type(e).__name__}: {e}")
        elif _import_hook is None:
            _import_hook = _DataLoaderImportHook()
            sys.meta_path.insert(0, _import_hook)
    return True


def uninstall() -> None:
    """Restore every patched function and stop writing events (idempotent)."""
    global _installed, _emit, _next_loader_id, _import_hook
    with _lock:
        for owner, name, orig, wrapper in reversed(_patches):
            try:
                current = (
                    owner.__dict__.get(name)
                    if isinstance(owner, type)
                    else getattr(owner, name, None)
                )
                if current is wrapper:
                    setattr(owner, name, orig)
            except Exception:
                pass
        _patches.clear()
        _missing.clear()
        _wait_hooked[0] = False
        _failure_hooks.uninstall_excepthook()
        if _import_hook is not None:
            try:
                sys.meta_path.remove(_import_hook)
            except ValueError:
                pass
            _import_hook = None
        for st in list(_iters.values()):
            _iter_end(st, END_SHUTDOWN)
        _iters.clear()
        _worker_pids.clear()
        _pin_ns.clear()
        _emit = None
        _next_loader_id = None
        _installed = False
        _ctx[0] = 0
        if _stack["file"] is not None and _stack["pid"] == os.getpid():
            try:
                faulthandler.unregister(STACK_SIGNAL)
                _stack["file"].close()
            except Exception:
                pass
            _stack["pid"], _stack["file"] = 0, None
        try:
            from .. import _ext

            _ext.trace_close()
        except Exception:
            pass


def installed() -> dict:
    """What is hooked in this process (for tests and `dldoctor check`)."""
    return {
        "installed": _installed,
        "ring": _ring_path,
        "run_dir": _run_dir,
        "patched": [f"{getattr(o, '__name__', o)}.{n}" for o, n, _, _ in _patches],
        "missing": sorted(set(_missing)),
        "stack_signal": STACK_SIGNAL,
    }
