"""The watcher's side of the failure rules: side-log records in, failure notes out to the C++
analyzer (`Monitor.note_failure`). The rules decide and word the findings themselves.

Records used: iter_start (fd limit, sharing strategy, pin_memory, the memory cgroup's OOM-kill
counter as a baseline), process_limits (a worker's own fd limit, when it changed it; an error
that says a process ran out of descriptors has that process's limit read from /proc too), worker_died (the counters at the death, so their rise says whether the
OOM killer took it; plus the copy of the worker's stderr tail the hooks keep), worker_exception,
queue_feeder_error, loader_error and uncaught_exception (error texts), cuda_memory. While the
job runs, the job's memory cgroup is read about once a second (its headroom).
"""

from __future__ import annotations

import re
import time

from ..job import failures as _failure_hooks
from ..job import memcg as _memcg

CGROUP_EVERY_NS = 1_000_000_000  # how often the job's memory cgroup is read while it runs
# How often the streaming findings are asked for warnings of a failure to come: the analysis
# of the recent window costs a few ms, and a risk said a second later is still in time.
RISKS_EVERY_NS = 1_000_000_000
# Warnings that announce a failure (the job will crash or hang), said as soon as they appear.
RISK_IDS = ("shm_exhausted", "fd_limit", "cuda_oom_risk", "pinned_memory_pressure", "ram_pressure")
_CUDA_FIELDS = (
    "loader",
    "device",
    "peak_bytes",
    "allocated_bytes",
    "reserved_bytes",
    "total_bytes",
    "t_ns",
)
# An error text that says a process ran out of descriptors (fd_limit's, see its rule).
_DESCRIPTORS_TEXT = re.compile(r"Too many open files|items of ancdata")


def read_nofile(pid: int, proc_root: str = "/proc") -> dict:
    """RLIMIT_NOFILE of process `pid` from /proc/<pid>/limits ({} when unreadable)."""
    try:
        with open(f"{proc_root}/{int(pid)}/limits", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Max open files"):
                    soft, hard = line[len("Max open files") :].split()[:2]
                    return {
                        "nofile_soft": None if soft == "unlimited" else int(soft),
                        "nofile_hard": None if hard == "unlimited" else int(hard),
                        "nofile_unlimited": soft == "unlimited",
                    }
    except (OSError, ValueError):
        pass
    return {}


_SOURCES = {
    "worker_exception": "worker",
    "queue_feeder_error": "queue_feeder",
    "loader_error": "loader",
    "uncaught_exception": "uncaught",
}


def _delta(now, base) -> int | None:
    if not isinstance(now, int) or not isinstance(base, int):
        return None
    return max(0, now - base)


class FailureNotes:
    """Turns one run's side-log records into failure notes for `monitor`."""

    def __init__(self, monitor, run_dir: str):
        self.monitor = monitor
        self.run_dir = run_dir
        # OOM-kill counters before anything of the job ran (the machine's), and at each
        # loader's first iterator (its memory cgroup's).
        self._machine_oom_base = _memcg.machine_oom_kills()
        self._cgroup_oom_base: dict[str, int] = {}  # cgroup path -> counter at first sight
        self._main_pids: set[int] = set()
        self._next_cgroup_ns = 0
        self._next_risks_ns = 0
        self._announced: set[str] = set()
        self._limits_read: set[int] = set()  # pids whose /proc/<pid>/limits was read

    def _note(self, note: dict) -> None:
        try:
            self.monitor.note_failure(note)
        except Exception:  # a malformed record is a lost note, never a failed run
            pass

    # -- records ---------------------------------------------------------------------------
    def on_record(self, rec: dict) -> None:
        kind = rec.get("type")
        if kind == "iter_start":
            self._iter_start(rec)
        elif kind == "worker_died":
            self._death(rec)
        elif kind == "process_limits":
            self._process_limits(rec, rec.get("pid"))
        elif kind in _SOURCES:
            if _DESCRIPTORS_TEXT.search(rec.get("message") or ""):
                self._limits_at_error(rec)
            self._note(
                {
                    "kind": "error",
                    "source": _SOURCES[kind],
                    "loader": rec.get("loader"),
                    "worker": rec.get("worker"),
                    "pid": rec.get("pid"),
                    "type": rec.get("exc_type") or "",
                    "message": rec.get("message") or "",
                    "t_ns": rec.get("t_ns"),
                    "cuda_peak_bytes": rec.get("cuda_peak_bytes"),
                    "cuda_total_bytes": rec.get("cuda_total_bytes"),
                    # A fetch's exception (loader_error): where it was raised and on what.
                    "traceback": rec.get("traceback"),
                    "samples": rec.get("samples"),
                    "index": rec.get("index"),
                    "epoch": rec.get("epoch"),
                }
            )
        elif kind == "cuda_memory":
            note = {k: rec.get(k) for k in _CUDA_FIELDS}
            note["kind"] = "cuda_memory"
            self._note(note)

    def _process_limits(self, rec: dict, pid) -> None:
        """A process's own RLIMIT_NOFILE (a worker that changed it, or one read from /proc at
        an error it printed): fd_limit quotes the limit of the process that ran out."""
        if not isinstance(pid, int):
            return
        self._note(
            {
                "kind": "runtime",
                "process_only": True,
                "loader": rec.get("loader"),
                "pid": pid,
                "nofile_soft": rec.get("nofile_soft"),
                "nofile_hard": rec.get("nofile_hard"),
                "nofile_unlimited": rec.get("nofile_unlimited"),
                "t_ns": rec.get("t_ns"),
            }
        )

    def _limits_at_error(self, rec: dict) -> None:
        """Out of descriptors: read that process's limit now, while it runs (once per pid)."""
        pid = rec.get("pid")
        if not isinstance(pid, int) or pid in self._limits_read:
            return
        self._limits_read.add(pid)
        limits = read_nofile(pid)
        if limits:
            self._process_limits({**rec, **limits}, pid)

    def _iter_start(self, rec: dict) -> None:
        pid = rec.get("main_pid") or rec.get("pid")
        if isinstance(pid, int):
            self._main_pids.add(pid)
        memcg = rec.get("memcg")
        if isinstance(memcg, dict) and isinstance(memcg.get("oom_kill"), int):
            self._cgroup_oom_base.setdefault(str(memcg.get("path")), memcg["oom_kill"])
        pin = rec.get("pin_memory")
        self._note(
            {
                "kind": "runtime",
                "loader": rec.get("loader"),
                "pid": pid,
                "sharing_strategy": rec.get("sharing_strategy") or "",
                "nofile_soft": rec.get("nofile_soft"),
                "nofile_hard": rec.get("nofile_hard"),
                "nofile_unlimited": rec.get("nofile_unlimited"),
                "pin_memory_requested": pin,
                # torch pins only with an accelerator: asked for and not in effect means none.
                "accelerator": rec.get("pin_memory_effective") if pin else None,
                "t_ns": rec.get("t_ns"),
            }
        )

    def _death(self, rec: dict) -> None:
        memcg = rec.get("memcg") if isinstance(rec.get("memcg"), dict) else {}
        path = str(memcg.get("path"))
        pid = rec.get("worker_pid")
        signal = rec.get("signal")
        self._note(
            {
                "kind": "death",
                "loader": rec.get("loader"),
                "worker": rec.get("worker"),
                "pid": pid,
                "exit_code": rec.get("exitcode"),
                "signal": signal,
                "message": rec.get("message") or "",
                "stderr_tail": _failure_hooks.stderr_tail(self.run_dir, pid)
                if isinstance(pid, int)
                else "",
                "cgroup_oom_kills": _delta(memcg.get("oom_kill"), self._cgroup_oom_base.get(path)),
                "machine_oom_kills": _delta(rec.get("machine_oom_kills"), self._machine_oom_base),
                "cgroup_limit_bytes": memcg.get("limit_bytes"),
                "cgroup_usage_bytes": memcg.get("usage_bytes"),
                "cgroup_peak_bytes": memcg.get("peak_bytes"),
                "t_ns": rec.get("t_ns"),
            }
        )

    # -- while the job runs ------------------------------------------------------------------
    def poll(self) -> None:
        """Read the job's memory cgroup (about once a second)."""
        now = time.monotonic_ns()
        if now < self._next_cgroup_ns or not self._main_pids:
            return
        self._next_cgroup_ns = now + CGROUP_EVERY_NS
        seen = set()
        for pid in list(self._main_pids):
            try:
                m = _memcg.read(pid)
            except Exception:
                m = None
            if not m or m["path"] in seen:
                continue
            seen.add(m["path"])
            if m.get("limit_bytes") is None:
                continue  # no limit: MemAvailable (the sampler's) is what counts
            self._note(
                {
                    "kind": "cgroup_memory",
                    "limit_bytes": m["limit_bytes"],
                    "usage_bytes": m["usage_bytes"],
                    "peak_bytes": m["peak_bytes"],
                    "t_ns": now,
                }
            )

    def new_risks(self, streaming) -> list[dict]:
        """Warnings of RISK_IDS in the streaming findings not said before (once a second).
        `streaming`: returns those findings (the watcher's shared decision)."""
        now = time.monotonic_ns()
        if now < self._next_risks_ns:
            return []
        self._next_risks_ns = now + RISKS_EVERY_NS
        try:
            findings = streaming()
        except Exception:
            return []
        out = []
        for f in findings:
            if f.get("severity") == "warning" and f.get("id") in RISK_IDS:
                if f["id"] not in self._announced:
                    self._announced.add(f["id"])
                    out.append(f)
        return out
