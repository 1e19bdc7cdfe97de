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

    def poll(self, everything: bool = False) -> list[dict]:
        """The complete records written since the last poll. `everything`: retired files
        too, whenever they were last looked at (the run's last poll)."""
        out: list[dict] = []
        try:
            names = sorted(
                n
                for n in os.listdir(self.run_dir)
                if n.startswith("side-") and n.endswith(".jsonl")
            )
        except OSError:
            return out
        now = time.monotonic_ns()
        recheck = everything or now >= self._next_retired_ns
        if recheck:
            self._next_retired_ns = now + RETIRED_EVERY_NS
        for name in names:
            path = os.path.join(self.run_dir, name)
            if name in self._retired:
                if not recheck:
                    continue
                try:
                    if os.stat(path).st_size == self._offsets.get(name, 0):
                        continue
                except OSError:
                    continue
                self._retired.discard(name)  # written again: a new process with that pid
            gone = _writer_gone(name)  # before the read: all it wrote is then in the file
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
