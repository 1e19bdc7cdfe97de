"""Sampled profiling of the fetch (__getitem__ + collate), so a slow_getitem finding can name
the hot functions. The fetch hook (C++) offers a candidate every PROFILE_EVERY-th fetch of a
process, the first at fetch PROFILE_FIRST (past warm-up: first reads, lazy imports), when the
loader's schedule allows it: the schedule lives in the event ring, shared by the loader's
main process and all its workers, those forked anew each epoch included, and spaces its
profiles at least PROFILE_MIN_INTERVAL_S apart, the spacing doubling after each profile up to
PROFILE_MAX_INTERVAL_S. A profiled fetch runs about 2x slower and costs 0.1-0.4 ms to summarise:
well under 0.5% of a tiny-batch loader, and on a slow one (the case that needs names) the
first profile still comes within a few fetches. Here, a candidate only checks that no one
else holds the profiler hook.
"""

from __future__ import annotations

import sys

from .. import _ext
from .process import JOB_DIR, note

# Imported here, in the main process as dldoctor installs: a worker forked later has it. A
# forked worker that imported it itself took ~6 ms of CPU (~0.3 ms here), at its first
# profile, in every new worker of every epoch.
try:
    import _lsprof
except ImportError:  # an interpreter without it: no profiles
    _lsprof = None

_CONSTANTS = _ext.batch_hook_constants()
PROFILE_EVERY = _CONSTANTS["profile_every"]
PROFILE_FIRST = _CONSTANTS["profile_first"]
PROFILE_MIN_INTERVAL_S = _CONSTANTS["profile_min_interval_ns"] / 1e9
PROFILE_MAX_INTERVAL_S = _CONSTANTS["profile_max_interval_ns"] / 1e9
# Functions kept per profile: the top by self time and the top by cumulative time.
PROFILE_TOP = 8


class ProfileSchedule:
    """Whether this process may profile the candidate the loader's schedule allowed."""

    __slots__ = ("off",)

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.off = False  # another tool owns the profiler hook: stop trying

    def due(self) -> bool:
        if self.off:
            return False
        return sys.getprofile() is None  # the user is profiling: do not take their profiler


SCHEDULE = ProfileSchedule()


def start():
    """A candidate fetch is about to run: a running profiler when it is due, else None."""
    if not SCHEDULE.due():
        return None
    if _lsprof is None:
        return None
    try:
        profiler = _lsprof.Profiler()
        profiler.enable()
        return profiler
    except Exception:
        SCHEDULE.off = True  # another tool owns the profiler hook (3.12+)
        return None


def finish(profiler, loader: int, worker: int, index: int, epoch: int, fetch_ns: int) -> None:
    """The profiled fetch returned (fetch_ns >= 0, then its profile is recorded) or raised."""
    profiler.disable()
    if fetch_ns < 0:
        return
    try:
        _record(profiler, loader, worker, index, epoch, fetch_ns)
    except Exception:
        pass


def _torch_threads() -> int | None:
    """torch's intra-op pool size now (PyTorch sets 1 in workers; user code may raise it)."""
    torch = sys.modules.get("torch")
    try:
        return int(torch.get_num_threads()) if torch is not None else None
    except Exception:
        return None


def _record(profiler, loader, worker, index, epoch, fetch_ns) -> None:
    rows = []
    for e in profiler.getstats():
        code = e.code
        if isinstance(code, str):
            if "_lsprof.Profiler" in code:
                continue
            name, loc = code, ""
        else:
            if code.co_filename.startswith(JOB_DIR):
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
    note(
        "profile",
        loader=loader,
        worker=worker,
        epoch=epoch,
        index=index,
        fetch_ns=fetch_ns,
        profiled_fetches=1,
        functions=functions,
        torch_threads=_torch_threads(),
    )
