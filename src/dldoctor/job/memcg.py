"""A process's memory cgroup (v1 or v2): its limit, the memory it really holds, its peak and
the OOM kills it counted; and the machine's OOM-kill counter.

Read by the hooks inside the job (at an iterator's start and at a worker's death, so the rise
of the counter in between says whether the OOM killer took the worker) and by the watcher
while the job runs (headroom). Plain file reads, no torch; every figure that cannot be read
is None, never 0.
"""

from __future__ import annotations

import os

# A v1 limit at or above this is "no limit" (the kernel writes PAGE_COUNTER_MAX x page size).
_UNLIMITED = 1 << 60

_mounts_cache: dict = {"pid": 0, "mounts": None}


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    text = text.strip()
    if not text or text == "max":
        return None
    try:
        return int(text)
    except ValueError:
        return None


def _keyed(text: str | None, key: str) -> int | None:
    """The value of `key N` in a flat keyed file (memory.stat, memory.events, oom_control)."""
    if text is None:
        return None
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] == key:
            return _int(parts[1])
    return None


def _mounts() -> list[tuple[str, str, str, str]]:
    """(fs type, root, mount point, super options) of the cgroup mounts, cached per process."""
    pid = os.getpid()
    if _mounts_cache["pid"] == pid and _mounts_cache["mounts"] is not None:
        return _mounts_cache["mounts"]
    out = []
    text = _read("/proc/self/mountinfo") or ""
    for line in text.splitlines():
        f = line.split()
        try:
            dash = f.index("-")
        except ValueError:
            continue
        fstype = f[dash + 1]
        if fstype in ("cgroup", "cgroup2"):
            out.append((fstype, f[3], f[4].replace("\\040", " "), f[dash + 3]))
    _mounts_cache["pid"], _mounts_cache["mounts"] = pid, out
    return out


def cgroup_dir(pid: int | str = "self") -> tuple[str, int] | None:
    """(directory of `pid`'s memory cgroup, 1 or 2), None when there is none to read."""
    text = _read(f"/proc/{pid}/cgroup")
    if text is None:
        return None
    lines = [ln.split(":", 2) for ln in text.splitlines() if ln.count(":") >= 2]
    mounts = _mounts()
    for _, ctrls, path in lines:
        if "memory" in ctrls.split(","):
            for fstype, root, point, opts in mounts:
                if fstype == "cgroup" and "memory" in opts.split(","):
                    rel = path[len(root) :] if root != "/" and path.startswith(root) else path
                    d = os.path.join(point, rel.lstrip("/"))
                    if os.path.exists(os.path.join(d, "memory.usage_in_bytes")):
                        return d, 1
    for hid, ctrls, path in lines:
        if hid == "0" and ctrls == "":
            for fstype, root, point, _ in mounts:
                if fstype == "cgroup2":
                    rel = path[len(root) :] if root != "/" and path.startswith(root) else path
                    d = os.path.join(point, rel.lstrip("/"))
                    if os.path.exists(os.path.join(d, "memory.current")):
                        return d, 2
    return None


def read(pid: int | str = "self") -> dict | None:
    """{"path", "version", "limit_bytes" (None: unlimited), "usage_bytes" (what the cgroup
    holds less its inactive page cache, which the kernel reclaims before it kills),
    "peak_bytes", "oom_kill" (kills counted so far)}; None when there is no memory cgroup."""
    found = cgroup_dir(pid)
    if found is None:
        return None
    d, version = found

    def f(name: str) -> str | None:
        return _read(os.path.join(d, name))

    stat = f("memory.stat")
    if version == 1:
        limit = _int(f("memory.limit_in_bytes"))
        if limit is not None and limit >= _UNLIMITED:
            limit = None
        usage = _int(f("memory.usage_in_bytes"))
        inactive = _keyed(stat, "total_inactive_file")
        peak = _int(f("memory.max_usage_in_bytes"))
        oom = _keyed(f("memory.oom_control"), "oom_kill")
    else:
        limit = _int(f("memory.max"))
        usage = _int(f("memory.current"))
        inactive = _keyed(stat, "inactive_file")
        peak = _int(f("memory.peak"))
        oom = _keyed(f("memory.events"), "oom_kill")
    if usage is not None and inactive is not None:
        usage = max(0, usage - inactive)
    return {
        "path": d,
        "version": version,
        "limit_bytes": limit,
        "usage_bytes": usage,
        "peak_bytes": peak,
        "oom_kill": oom,
    }


def machine_oom_kills() -> int | None:
    """OOM kills on the whole machine since boot (/proc/vmstat oom_kill, Linux >= 4.13)."""
    return _keyed(_read("/proc/vmstat"), "oom_kill")
