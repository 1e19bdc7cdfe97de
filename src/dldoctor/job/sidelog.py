"""The side log: rare, string-bearing records (loader config names, worker starts, exception
texts, __getitem__ profiles, worker deaths) that do not fit a 64-byte event.

Each process appends JSON lines to `<run_dir>/side-<pid>.jsonl` through its own O_APPEND
descriptor; one record is one write(2), so a reader never sees two records interleaved.
Writing never raises: a side log that cannot be written is a lost record, not a broken job.
"""

from __future__ import annotations

import json
import os
import time

_run_dir: str | None = None
_fd: int = -1
_fd_pid: int = 0  # the process that opened _fd; a forked child opens its own file


def configure(run_dir: str | None) -> None:
    """Set the run directory this process writes to (None: stop writing)."""
    global _run_dir
    if run_dir != _run_dir:
        _close()
        _run_dir = run_dir


def run_dir() -> str | None:
    return _run_dir


def _close() -> None:
    global _fd
    if _fd >= 0 and _fd_pid == os.getpid():
        try:
            os.close(_fd)
        except OSError:
            pass
    _fd = -1


def _descriptor() -> int:
    global _fd, _fd_pid
    pid = os.getpid()
    if _fd >= 0 and _fd_pid == pid:
        return _fd
    if _run_dir is None:
        return -1
    # After fork the inherited descriptor points at the parent's file: leave it alone (the
    # parent still owns it) and open this process's own.
    path = os.path.join(_run_dir, f"side-{pid}.jsonl")
    _fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)
    _fd_pid = pid
    return _fd


def write(record: dict) -> bool:
    """Append one record (adds pid and t_ns, CLOCK_MONOTONIC). False when not written."""
    try:
        fd = _descriptor()
        if fd < 0:
            return False
        rec = {"pid": os.getpid(), "t_ns": time.monotonic_ns()}
        rec.update(record)
        data = (json.dumps(rec, default=str, separators=(",", ":")) + "\n").encode(
            "utf-8", "replace"
        )
        os.write(fd, data)
        return True
    except Exception:
        return False


def read_all(run_dir: str) -> list[dict]:
    """Every complete record of every process of a run, ordered by t_ns.

    A line still being written (no newline yet) or not JSON is skipped, never raised on.
    """
    out: list[dict] = []
    try:
        names = sorted(
            n for n in os.listdir(run_dir) if n.startswith("side-") and n.endswith(".jsonl")
        )
    except OSError:
        return out
    for name in names:
        try:
            with open(os.path.join(run_dir, name), "rb") as f:
                data = f.read()
        except OSError:
            continue
        for line in data.split(b"\n")[:-1]:  # the part after the last newline is unfinished
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
    out.sort(key=lambda r: r.get("t_ns", 0))
    return out
