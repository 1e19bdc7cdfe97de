"""What this process is hooked to (the ring, the run directory, the stack-dump signal) and
the small helpers every hook module shares: the side-log note, names of objects, and hiding
a wrapper's own frame from a traceback.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import time

from . import sidelog
from .stackdump import STACK_SIGNAL, STACK_SIGNAL_NATIVE, StackDump

# Frames of this package are dldoctor's, not the user's (profiles and tracebacks skip them).
JOB_DIR = os.path.dirname(os.path.abspath(__file__))


class ProcessHooks:
    """This process's hook state: set by install(), cleared by uninstall()."""

    __slots__ = (
        "installed",
        "fork_hook",
        "ring_path",
        "run_dir",
        "emit",
        "next_loader_id",
        "stack_pid",
        "stack_dump",
    )

    def __init__(self):
        self.installed = False
        self.fork_hook = False  # os.register_at_fork and atexit done (they cannot be undone)
        self.ring_path: str | None = None
        self.run_dir: str | None = None
        self.emit = None  # _ext.trace_emit while a ring is open
        self.next_loader_id = None
        self.stack_pid = 0  # the process whose stack dump is registered
        self.stack_dump: StackDump | None = None


PROCESS = ProcessHooks()
lock = threading.RLock()


def note(kind: str, **fields) -> None:
    rec = {"type": kind}
    rec.update(fields)
    sidelog.write(rec)


def hide_frame(e: BaseException) -> None:
    """Drop the calling wrapper's own entry from e's traceback before a bare `raise`, so the
    user sees the same traceback as without dldoctor (Python >= 3.11; harmless before)."""
    tb = e.__traceback__
    if tb is not None and tb.tb_frame is sys._getframe(1):
        e.__traceback__ = tb.tb_next


def qualname(obj) -> str | None:
    if obj is None:
        return None
    try:
        target = obj.func if isinstance(obj, functools.partial) else obj
        mod = getattr(target, "__module__", None) or getattr(type(target), "__module__", "")
        name = getattr(target, "__qualname__", None) or type(target).__qualname__
        return f"{mod}.{name}" if mod else name
    except Exception:
        return None


def type_name(obj) -> str | None:
    if obj is None:
        return None
    t = type(obj)
    return f"{t.__module__}.{t.__qualname__}"


def proc_start_ns() -> int:
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


def register_stack_dump() -> None:
    """Let STACK_SIGNAL (and STACK_SIGNAL_NATIVE) dump this process's stacks to
    <run_dir>/stack-<pid>.txt; announced in the side log."""
    pid = os.getpid()
    p = PROCESS
    if p.run_dir is None or p.stack_pid == pid:
        return
    try:
        path = os.path.join(p.run_dir, f"stack-{pid}.txt")
        dump = StackDump(path)
        dump.register()
        old = p.stack_dump  # a forked child's: the parent's file, left open by fork
        p.stack_pid, p.stack_dump = pid, dump
        if old is not None:
            try:
                old.file.close()
            except Exception:
                pass
        note(
            "process",
            ppid=os.getppid(),
            stack_signal=STACK_SIGNAL,
            stack_signal_native=STACK_SIGNAL_NATIVE,
            stack_safe_point=dump.safe_point,
            stack_file=path,
            argv=sys.argv[:16],
        )
    except Exception as e:
        note("hook_error", where="stack_dump", error=f"{type(e).__name__}: {e}")


def unregister_stack_dump() -> None:
    p = PROCESS
    if p.stack_dump is not None and p.stack_pid == os.getpid():
        try:
            p.stack_dump.unregister()
        except Exception:
            pass
        p.stack_pid, p.stack_dump = 0, None
