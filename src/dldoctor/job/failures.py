"""Deaths and failures: what the hooks record when something goes wrong, kept off the
per-batch paths.

In the main process: workers found dead (by the loader's error, PyTorch's SIGCHLD handler,
or a failed receive) with their exit code or signal, the job's fd limit, sharing strategy and
memory cgroup at each iterator start (the OOM-kill counter's baseline) and the same counters
at a death, the exception the loader raised, the exception that ended the process
(sys.excepthook, chained) and CUDA memory between steps when the job itself initialized
CUDA. In a worker: the text of a batch that could not be sent (multiprocessing's queue
feeder prints it and drops the batch) and a copy of the last few KiB it wrote to sys.stderr.

Every function here is best effort: it never raises into the job and never changes what the
job sees (the same exceptions, the same output, the same stderr).
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading

from . import memcg as _memcg
from .events import K_WORKER_DIED
from .process import PROCESS, hide_frame, note

# A worker's stderr copy keeps this many of the newest characters: enough for a traceback and
# the lines before it, small enough to rewrite on every write (workers rarely write there).
STDERR_TAIL_CHARS = 8192
MESSAGE_MAX = 4000

_lock = threading.Lock()


class _Chained:
    """The sys.excepthook this module chained to (None: not installed)."""

    __slots__ = ("excepthook",)

    def __init__(self):
        self.excepthook = None


_chained = _Chained()


def _text(e: BaseException) -> str:
    try:
        return str(e)[:MESSAGE_MAX]
    except Exception:
        return "<unprintable>"


def _type(e: BaseException) -> str:
    t = type(e)
    return f"{t.__module__}.{t.__qualname__}"


# -- main process ---------------------------------------------------------------------------
def nofile() -> dict:
    try:
        import resource

        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        inf = resource.RLIM_INFINITY
        return {
            "nofile_soft": None if soft == inf else soft,
            "nofile_hard": None if hard == inf else hard,
            "nofile_unlimited": soft == inf,
        }
    except Exception:
        return {}


def _sharing_strategy() -> str | None:
    torch = sys.modules.get("torch")
    try:
        return torch.multiprocessing.get_sharing_strategy() if torch is not None else None
    except Exception:
        return None


def iter_start_facts(first_epoch: bool = True) -> dict:
    """Fields for the iter_start record: fd limit and sharing strategy (a few us), and on a
    loader's first epoch its memory cgroup (the OOM-kill baseline; ~0.2 ms of file reads, too
    much to repeat for loaders with many short epochs)."""
    out = nofile()
    out["sharing_strategy"] = _sharing_strategy()
    if first_epoch:
        try:
            out["memcg"] = _memcg.read()
            out["machine_oom_kills"] = _memcg.machine_oom_kills()
        except Exception:
            pass
    return out


def death_facts() -> dict:
    """Fields for the worker_died record: the counters to compare with the iterator's start."""
    try:
        return {"memcg": _memcg.read(), "machine_oom_kills": _memcg.machine_oom_kills()}
    except Exception:
        return {}


def on_loader_error(it, st, e: BaseException) -> None:
    """The loader raised `e` to the consumer (a worker's re-raised exception, a death, a
    timeout, a failed receive): record its text, and any worker found dead (a killed worker
    can surface as another error first, e.g. a reset connection mid-receive)."""
    try:
        note("loader_error", loader=st.loader_id, exc_type=_type(e), message=_text(e))
        for i, w in enumerate(getattr(it, "_workers", None) or ()):
            try:
                if exit_status(w) != (0, None):  # a clean exit (shutdown) is no death
                    report_death(st, i, w, f"{type(e).__name__}: {e}")
            except Exception:
                pass
    except Exception:
        pass


# -- worker deaths, seen by the main process ----------------------------------------------
_DEATH_PIDS = re.compile(r"\d+")


def exit_status(w) -> tuple[int | None, int | None]:
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


def report_death(st, worker_id: int, w, message: str) -> None:
    """Worker `worker_id` of the iterator whose state is `st` is dead: one kWorkerDied event
    and a worker_died record with the counters that tell an OOM kill (once per worker)."""
    if worker_id in st.died:
        return
    code, sig = exit_status(w) if w is not None else (None, None)
    if code is None and sig is None and w is not None and w.is_alive():
        return
    st.died.add(worker_id)
    pid = getattr(w, "pid", None)
    emit = PROCESS.emit
    if emit is not None:
        emit(
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
    note(
        "worker_died",
        loader=st.loader_id,
        worker=worker_id,
        worker_pid=pid,
        exitcode=code,
        signal=sig,
        signal_name=sig_name,
        message=message[:2000],
        **death_facts(),
    )


def on_death_error(iters, it, e: BaseException) -> None:
    """PyTorch raised "DataLoader worker (pid(s) ...) exited unexpectedly": find the dead
    workers through the iterator `it`, or (from the SIGCHLD handler, it None) through their
    pids in `iters` (the main side's registry: states, worker_pids)."""
    try:
        message = str(e)
        if "DataLoader worker" not in message:
            return
        pids = {int(p) for p in _DEATH_PIDS.findall(message.split(")", 1)[0])}
        if it is not None:
            st = iters.states.get(id(it))
            if st is not None:
                for i, w in enumerate(getattr(it, "_workers", ())):
                    if w.pid in pids or not pids:
                        report_death(st, i, w, message)
                return
        for pid in pids:
            entry = iters.worker_pids.get(pid)
            if entry is None:
                continue
            st, i = entry
            it_obj = st.ref() if st.ref is not None else None
            workers = getattr(it_obj, "_workers", None) or ()
            w = workers[i] if i < len(workers) else None
            report_death(st, i, w, message)
    except Exception:
        pass


def make_error_if_any_worker_fails(orig, iters):
    """PyTorch's SIGCHLD handler raises when a worker died: record which, raise the same."""

    def _error_if_any_worker_fails(*args, **kwargs):
        try:
            return orig(*args, **kwargs)
        except BaseException as e:
            if isinstance(e, RuntimeError):
                on_death_error(iters, None, e)
            hide_frame(e)
            raise

    return _error_if_any_worker_fails


def _cuda_figures() -> dict:
    """CUDA memory of the current device, only when the job has initialized CUDA itself."""
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None) if torch is not None else None
    if cuda is None or not cuda.is_initialized():
        return {}
    dev = cuda.current_device()
    return {
        "device": dev,
        "peak_bytes": int(cuda.max_memory_allocated(dev)),
        "allocated_bytes": int(cuda.memory_allocated(dev)),
        "reserved_bytes": int(cuda.memory_reserved(dev)),
        "total_bytes": int(cuda.get_device_properties(dev).total_memory),
    }


def cuda_memory(loader_id: int) -> None:
    """CUDA memory between two steps of `loader_id`'s consumer (called time-throttled)."""
    try:
        figures = _cuda_figures()
        if figures:
            note("cuda_memory", loader=loader_id, **figures)
    except Exception:
        pass


def _excepthook(tp, value, tb):
    try:
        rec = {"exc_type": f"{tp.__module__}.{tp.__qualname__}", "message": _text(value)}
        try:
            cuda = _cuda_figures()
            if cuda:
                rec["cuda_peak_bytes"] = cuda["peak_bytes"]
                rec["cuda_total_bytes"] = cuda["total_bytes"]
        except Exception:
            pass
        note("uncaught_exception", **rec)
    except Exception:
        pass
    prev = _chained.excepthook or sys.__excepthook__
    return prev(tp, value, tb)


def install_excepthook() -> None:
    """Chain sys.excepthook so the exception that ends the process is recorded."""
    with _lock:
        if sys.excepthook is _excepthook:
            return
        _chained.excepthook = sys.excepthook
        sys.excepthook = _excepthook


def uninstall_excepthook() -> None:
    with _lock:
        if sys.excepthook is _excepthook:
            sys.excepthook = _chained.excepthook or sys.__excepthook__
        _chained.excepthook = None


# -- worker process -------------------------------------------------------------------------
def _patch_queue_feeder(loader_id: int, worker_id: int) -> None:
    """multiprocessing's queue feeder thread prints a batch that fails to pickle (no room in
    /dev/shm, no descriptor left) and drops it: the main process then waits for it forever.
    Record the text before the feeder prints it."""
    import multiprocessing.queues as mq

    cls = mq.Queue
    current = cls.__dict__.get("_on_queue_feeder_error")
    orig = getattr(current, "__func__", None)
    if orig is None or getattr(orig, "__dldoctor_orig__", None) is not None:
        return

    def _on_queue_feeder_error(e, obj):
        try:
            note(
                "queue_feeder_error",
                loader=loader_id,
                worker=worker_id,
                exc_type=_type(e),
                message=_text(e),
            )
        except Exception:
            pass
        return orig(e, obj)

    _on_queue_feeder_error.__dldoctor_orig__ = orig
    cls._on_queue_feeder_error = staticmethod(_on_queue_feeder_error)


class _StderrCopy:
    """Stands in for sys.stderr in a worker: writes go to the real stream unchanged, and the
    newest STDERR_TAIL_CHARS also to <run_dir>/stderr-<pid>.txt, so that a worker that dies
    leaves what it said last."""

    def __init__(self, stream, path: str):
        self._stream = stream
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
        self._tail = ""

    def write(self, s):
        n = self._stream.write(s)
        try:
            text = s if isinstance(s, str) else bytes(s).decode("utf-8", "replace")
            self._tail = (self._tail + text)[-STDERR_TAIL_CHARS:]
            data = self._tail.encode("utf-8", "replace")
            os.pwrite(self._fd, data, 0)
            os.ftruncate(self._fd, len(data))
        except Exception:
            pass
        return n

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def worker_started(run_dir: str | None, loader_id: int, worker_id: int) -> None:
    """In a worker, once: record batches lost in the send, keep a copy of stderr's tail."""
    try:
        _patch_queue_feeder(loader_id, worker_id)
    except Exception:
        pass
    if not run_dir:
        return
    try:
        current = sys.stderr
        if current is None or isinstance(current, _StderrCopy):
            return
        sys.stderr = _StderrCopy(current, os.path.join(run_dir, f"stderr-{os.getpid()}.txt"))
    except Exception:
        pass


def stderr_tail(run_dir: str, pid: int, chars: int = 4000) -> str:
    """The copy of `pid`'s stderr tail (watcher side); "" when there is none."""
    try:
        with open(
            os.path.join(run_dir, f"stderr-{int(pid)}.txt"), encoding="utf-8", errors="replace"
        ) as f:
            return f.read()[-chars:]
    except (OSError, ValueError):
        return ""
