"""A process's Python stacks on request, for the hang doctor: two signals, one file.

STACK_SIGNAL asks for every thread's stack at the next safe point. Its handler is a Python
one: CPython's C handler only records the signal, and the main thread runs ours between two
bytecodes, holding the GIL, so every other thread is parked where its frames cannot change.
A main thread blocked in a lock, a queue or a sleep is woken by the signal (the hang doctor
sends it to that thread) and runs the handler at once.

STACK_SIGNAL_NATIVE is the fallback for a main thread that never reaches a safe point (stuck
in C code): faulthandler's dump from the C handler, of that thread only. The hang doctor
sends it when no stack came within a moment of the first.

Why not faulthandler's all-threads dump, as before: it walks the other threads' frames from
the signal handler while they run, and crashes the process when one pushes or pops a frame
under it (CPython gh-116008). A DataLoader worker always has such a thread, the queue feeder
that pickles each batch: 1 signal in a few crashed a busy worker.

Both handlers append to <run_dir>/stack-<pid>.txt in faulthandler's format, which the hang
doctor's parser reads (dldoctor_core/watchdog/stack.hpp).
"""

from __future__ import annotations

import faulthandler
import os
import signal
import sys
import threading

# Not SIGUSR1/SIGUSR2: PyTorch's c10 FatalSignalHandler takes SIGUSR2 over (it uses it to
# make threads print C++ stacks when a fatal signal arrives), and torchelastic/SLURM use them
# for preemption notices. Real-time signals are free in practice. Their default action is to
# terminate, so they must only be sent to pids that announced them in the side log
# ("process" records) and that catch them (/proc/<pid>/status SigCgt).
# The C++ side's watchdog::default_stack_signal() and native_stack_signal() are the same.
STACK_SIGNAL = int(getattr(signal, "SIGRTMAX", 64)) - 6
STACK_SIGNAL_NATIVE = STACK_SIGNAL - 1

# faulthandler's limits, kept so both dumps read alike.
MAX_FRAMES = 100
MAX_THREADS = 100


def format_stacks(current_frame=None) -> str:
    """Every thread's Python stack in faulthandler's all-threads format, newest thread first.
    The calling thread is the "Current thread", shown from `current_frame` (a signal
    handler's interrupted frame) instead of from its own frame. Call it holding the GIL."""
    me = threading.get_ident()
    out = []
    for n, (ident, frame) in enumerate(sys._current_frames().items()):
        if n == MAX_THREADS:
            out.append("...")
            break
        if n:
            out.append("")
        if ident == me:
            frame = current_frame
            out.append(f"Current thread 0x{ident:016x} (most recent call first):")
        else:
            out.append(f"Thread 0x{ident:016x} (most recent call first):")
        if frame is None:
            out.append("  <no Python frame>")
        depth = 0
        while frame is not None:
            if depth == MAX_FRAMES:
                out.append("  ...")
                break
            code = frame.f_code
            line = frame.f_lineno
            out.append(
                f'  File "{code.co_filename}", line {"???" if line is None else line}'
                f" in {code.co_name}"
            )
            frame = frame.f_back
            depth += 1
    return "\n".join(out) + "\n"


class StackDump:
    """Both handlers of one process, writing to one open file (kept open: faulthandler
    writes to its fd)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.file = open(path, "a", encoding="utf-8")
        self.prev = None  # the Python handler STACK_SIGNAL had before ours
        self.safe_point = False  # STACK_SIGNAL is ours (needs the main thread to set)

    def register(self) -> None:
        prev_native = signal.getsignal(STACK_SIGNAL_NATIVE)
        # chain=True calls the previous handler after the dump; with SIG_DFL that previous
        # handler is "terminate", so chain only to a real one.
        faulthandler.register(
            STACK_SIGNAL_NATIVE,
            file=self.file,
            all_threads=False,
            chain=prev_native not in (signal.SIG_DFL, signal.SIG_IGN, None),
        )
        prev = signal.getsignal(STACK_SIGNAL)
        owner = getattr(prev, "__self__", None)
        if isinstance(owner, StackDump):  # inherited through fork: chain to what it chained to
            prev = owner.prev
        try:
            signal.signal(STACK_SIGNAL, self._on_signal)
        except ValueError:
            # Not the main thread: only the main thread may set a Python handler. The hang
            # doctor then sends STACK_SIGNAL_NATIVE straight away.
            return
        self.prev = prev
        self.safe_point = True

    def unregister(self) -> None:
        faulthandler.unregister(STACK_SIGNAL_NATIVE)
        if self.safe_point:
            prev = self.prev if self.prev is not None else signal.SIG_DFL
            try:
                if signal.getsignal(STACK_SIGNAL) == self._on_signal:
                    signal.signal(STACK_SIGNAL, prev)
            except ValueError:
                pass
            self.safe_point = False
        self.file.close()

    def _on_signal(self, signum, frame) -> None:
        try:
            data = format_stacks(frame).encode("utf-8", "backslashreplace")
            fd = self.file.fileno()
            while data:
                data = data[os.write(fd, data) :]
        except Exception:
            pass  # a dump never raises into the user's code
        prev = self.prev
        if callable(prev):
            prev(signum, frame)
