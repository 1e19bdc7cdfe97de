"""Reads the job's per-process side logs (JSON lines, rare records only) incrementally: each
poll returns the complete records written since the last one; a line still being written is
kept for the next poll.

Every process of the job has its own file (`side-<pid>.jsonl`), and a loader without
persistent workers forks new ones each epoch, so a long job leaves hundreds of files. A file
whose writer had exited before it was read to its end is done: it is retired and looked at
again only every RETIRED_EVERY_NS (by its size; a new process that got the same pid appends
to it), so a poll opens the files of live processes only. The last poll of a run reads them
all."""

from __future__ import annotations

import json
import os
import time

# How often a retired file's size is looked at again (a reused pid's records then come late
# by at most this much; the final poll reads everything).
RETIRED_EVERY_NS = 5_000_000_000
# The folder is listed again at least this often, whether or not its time changed.
RELIST_EVERY_NS = 1_000_000_000


def _writer_gone(name: str) -> bool:
    """Whether the process named in `side-<pid>.jsonl` has exited (and been reaped)."""
    try:
        pid = int(name[len("side-") : -len(".jsonl")])
    except ValueError:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False  # it exists (another user's, say)
    return False


class SideLogTail:
    """Reads the per-process JSON-lines side logs incrementally (rare records only)."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, str] = {}
        self._retired: set[str] = set()
        self._next_retired_ns = 0
        self._listed: list[str] = []
        self._dir_mtime = -1
        self._next_list_ns = 0

    def _names(self, now: int, everything: bool) -> list[str]:
        """The side logs' names, listed again when the folder changed (a process started), at
        least every RELIST_EVERY_NS (two files made within one tick of the folder's clock leave
        it as it was after the first), and on the last poll."""
        mtime = os.stat(self.run_dir).st_mtime_ns
        if everything or mtime != self._dir_mtime or now >= self._next_list_ns:
            self._listed = sorted(
                n
                for n in os.listdir(self.run_dir)
                if n.startswith("side-") and n.endswith(".jsonl")
            )
            self._dir_mtime = mtime
            self._next_list_ns = now + RELIST_EVERY_NS
        return self._listed

    def poll(self, everything: bool = False) -> list[dict]:
        """The complete records written since the last poll. `everything`: retired files
        too, whenever they were last looked at (the run's last poll)."""
        out: list[dict] = []
        now = time.monotonic_ns()
        try:
            names = self._names(now, everything)
        except OSError:
            return out
        recheck = everything or now >= self._next_retired_ns
        if recheck:
            self._next_retired_ns = now + RETIRED_EVERY_NS
        for name in names:
            if name in self._retired and not recheck:
                continue
            path = os.path.join(self.run_dir, name)
            if name in self._retired:
                try:
                    if os.stat(path).st_size == self._offsets.get(name, 0):
                        continue
                except OSError:
                    continue
                self._retired.discard(name)  # written again: a new process with that pid
            gone = _writer_gone(name)  # before the read: all it wrote is then in the file
            try:
                # Most polls find nothing new (records are rare): a stat, not an open and a
                # read, for each live process's file (a tenth of the cost, 4 polls a second).
                unchanged = os.stat(path).st_size == self._offsets.get(name, 0)
            except OSError:
                continue
            if unchanged:
                if gone:
                    self._retired.add(name)
                    self._partial.pop(name, None)  # a line it never finished
                continue
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    f.seek(self._offsets.get(name, 0))
                    chunk = f.read()
                    self._offsets[name] = f.tell()
            except OSError:
                continue
            if gone:
                self._retired.add(name)
            text = self._partial.pop(name, "") + chunk
            lines = text.split("\n")
            if lines and lines[-1] and not gone:
                self._partial[name] = lines[-1]  # a record still being written
            for line in lines[:-1]:
                if not line.strip():
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return out
