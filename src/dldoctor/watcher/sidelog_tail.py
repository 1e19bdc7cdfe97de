"""Reads the job's per-process side logs (JSON lines, rare records only) incrementally: each
poll returns the complete records written since the last one; a line still being written is
kept for the next poll."""

from __future__ import annotations

import json
import os


class SideLogTail:
    """Reads the per-process JSON-lines side logs incrementally (rare records only)."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self._offsets: dict[str, int] = {}
        self._partial: dict[str, str] = {}

    def poll(self) -> list[dict]:
        out: list[dict] = []
        try:
            names = sorted(n for n in os.listdir(self.run_dir) if n.startswith("side-"))
        except OSError:
            return out
        for name in names:
            path = os.path.join(self.run_dir, name)
            try:
                with open(path, encoding="utf-8", errors="replace") as f:
                    f.seek(self._offsets.get(name, 0))
                    chunk = f.read()
                    self._offsets[name] = f.tell()
            except OSError:
                continue
            text = self._partial.pop(name, "") + chunk
            lines = text.split("\n")
            if lines and lines[-1]:
                self._partial[name] = lines[-1]  # a record still being written
            for line in lines[:-1]:
                if not line.strip():
                    continue
                try:
                    out.append(json.loads(line))
                except json.JSONDecodeError:
                    continue
        return out
