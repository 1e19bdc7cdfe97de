"""The Chrome trace event format (JSON) of a run, for Perfetto (ui.perfetto.dev) and
chrome://tracing: a track per worker with its fetch / getitem / collate spans, a track per
loader in the main process with its wait and step spans, and counter tracks (shm used,
available memory, CPU; per GPU the share of time a kernel ran and its memory, from NVML).
Rendered from the events and counters the monitor recorded.

Every timestamp is CLOCK_MONOTONIC (the one clock all the job's processes share), in
microseconds as the format wants; durations come from the same records, so spans of one
process line up with those of another to the microsecond.
"""

from __future__ import annotations

import bisect
import json
import sys
from collections import defaultdict

from .. import _ext
from ..errors import DldoctorError
from ..job.events import (
    B_PROFILED,
    END_ERROR,
    END_EXHAUSTED,
    END_SHUTDOWN,
    K_ITER_END,
    K_ITER_START,
    K_MAIN_BATCH,
    K_WORKER_BATCH,
    K_WORKER_DIED,
    K_WORKER_DRAINED,
    K_WORKER_EXCEPTION,
    K_WORKER_EXIT,
    K_WORKER_START,
)
from ..report import loader_labels

# A stream of batches faster than this is measured as a sample (trace::kSampleAbovePerSecond),
# and so are the hand-outs of a loader with workers faster than the second.
_HOOKS = _ext.batch_hook_constants()
SAMPLE_ABOVE_PER_S = _HOOKS["sample_above_per_second"]
HANDOUTS_SAMPLE_ABOVE_PER_S = _HOOKS["multi_handouts_sample_above_per_second"]
SAMPLED_NOTE = " (a sample: see stands_for)"

# Synthetic ids: above any Linux pid (pid_max <= 2**22), so they never meet a real one.
MACHINE_PID = 1 << 30
GPU_PID = (1 << 30) + 1  # the GPUs' counter tracks (NVML)
MAIN_LOOP_TID = 1 << 24  # + loader id: the main process's wait/step track of a loader
MAIN_FETCH_TID = 2 << 24  # + loader id: fetches in the main process (num_workers=0)
# A trace this large takes seconds to write (~15 s for a million records): show progress.
PROGRESS_ABOVE = 100_000
PROGRESS_EVERY = 10_000
END_REASONS = {
    END_EXHAUSTED: "exhausted",
    END_SHUTDOWN: "shut down early",
    END_ERROR: "creation failed",
}


def _us(ns: int) -> float:
    return round(ns / 1000.0, 3)


class _Epochs:
    """Which epoch of a loader a timestamp falls in, from its iterators' start times (the
    hooks write an iterator's start before it asks its workers for anything)."""

    def __init__(self):
        self.starts: dict[int, list[tuple[int, int]]] = defaultdict(list)

    def add(self, loader: int, t_ns: int, epoch: int) -> None:
        self.starts[loader].append((t_ns, epoch))

    def finish(self) -> None:
        for v in self.starts.values():
            v.sort()

    def of(self, loader: int, t_ns: int) -> int | None:
        v = self.starts.get(loader)
        if not v:
            return None
        i = bisect.bisect_right(v, (t_ns, float("inf"))) - 1
        return v[max(i, 0)][1]


def build(trace: dict, report=None) -> dict:
    """The trace as a dict in the trace event format (JSON object form)."""
    other, events = _stream(trace, report)
    return {"traceEvents": list(events), "displayTimeUnit": "ms", "otherData": other}


def _stream(trace: dict, report=None, on_records=None):
    """(otherData, an iterator of trace events): a million records become a few million
    trace events, so they are made one at a time as they are written."""
    raw = sorted(trace.get("events") or [], key=lambda e: e[2])
    names: dict[tuple[int, int | None], str] = {}  # (pid, tid or None) -> name
    sort_index: dict[int, int] = {}
    epochs = _Epochs()
    worker_of_pid: dict[int, tuple[int, int]] = {}
    main_pids: set[int] = set()
    labels = loader_labels(getattr(report, "loaders", None) or [])

    def label_of(loader: int) -> str:  # "loader 2", or "rank 1 · loader 1" in a multi-rank job
        return labels.get(loader) or f"loader {loader}"

    # First pass: who is who, and the epochs, so every track is named up front.
    sampled: set[tuple[int, int]] = set()  # tracks (pid, tid) that show a sample
    for kind, pid, t, _flags, loader, worker, _index, _count, _v0, v1, _v2, v3, weight in raw:
        if kind == K_ITER_START:
            epochs.add(loader, t, v3)
            if v1 > 0:
                main_pids.add(v1)
                names[(v1, MAIN_LOOP_TID + loader)] = f"{label_of(loader)}: wait / step"
        elif kind in (K_WORKER_START, K_WORKER_BATCH) and worker >= 0:
            worker_of_pid[pid] = (loader, worker)
            if weight > 1:
                sampled.add((pid, pid))
        elif kind == K_WORKER_BATCH:  # the main process fetched it itself (num_workers=0)
            main_pids.add(pid)
            names[(pid, MAIN_FETCH_TID + loader)] = f"{label_of(loader)}: fetch (num_workers=0)"
            if weight > 1:
                sampled.add((pid, MAIN_FETCH_TID + loader))
        elif kind == K_MAIN_BATCH:
            main_pids.add(pid)
            names.setdefault((pid, MAIN_LOOP_TID + loader), f"{label_of(loader)}: wait / step")
            if weight > 1:
                sampled.add((pid, MAIN_LOOP_TID + loader))
    epochs.finish()
    for pid, (loader, worker) in worker_of_pid.items():
        names[(pid, None)] = f"{label_of(loader)} worker {worker} (pid {pid})"
        names[(pid, pid)] = f"worker {worker}: fetch"
        sort_index[pid] = 100 + loader * 1000 + worker
    for pid in main_pids:
        names[(pid, None)] = f"main process (pid {pid})"
        sort_index[pid] = 0
    for track in sampled:
        if track in names:
            names[track] += SAMPLED_NOTE
    if trace.get("machine"):
        names[(MACHINE_PID, None)] = "machine"
    if trace.get("gpus"):
        names[(GPU_PID, None)] = "GPUs (NVML)"
        sort_index[GPU_PID] = 1

    dropped = int(trace.get("dropped_events") or 0)
    other = {
        "tool": "dldoctor",
        "clock": "CLOCK_MONOTONIC",
        "events_kept": len(raw),
        "events_dropped": dropped,
        "counters_dropped": int(trace.get("dropped_counters") or 0),
        "cut": bool(dropped),
        # Streams of batches faster than the threshold are shown as a random sample: their
        # tracks say so, and each span's args say how many batches it stands for.
        "sampled": bool(sampled),
        "sample_above_batches_per_s": SAMPLE_ABOVE_PER_S,
        "sample_handouts_with_workers_above_per_s": HANDOUTS_SAMPLE_ABOVE_PER_S,
    }
    if report is not None:
        other.update(
            verdict=report.verdict, command=report.command, tool_version=report.tool_version
        )

    def events():
        yield from _metadata(names, sort_index)
        yield from _spans(raw, epochs, on_records)
        yield from _counters(trace, worker_of_pid, main_pids)
        if dropped and raw:
            yield {
                "name": f"trace cut: {dropped} later events were not kept "
                f"(cap {trace.get('max_events')})",
                "ph": "i",
                "s": "g",
                "ts": _us(raw[-1][2]),
                "pid": MACHINE_PID,
                "tid": 0,
            }

    return other, events()


def _metadata(names: dict, sort_index: dict):
    for (pid, tid), name in names.items():
        if tid is None:
            yield {"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}}
            if pid in sort_index:
                yield {
                    "name": "process_sort_index",
                    "ph": "M",
                    "pid": pid,
                    "args": {"sort_index": sort_index[pid]},
                }
        else:
            yield {
                "name": "thread_name",
                "ph": "M",
                "pid": pid,
                "tid": tid,
                "args": {"name": name},
            }


def _spans(raw: list, epochs: _Epochs, on_records=None):
    for n, (kind, pid, t, flags, loader, worker, index, count, v0, v1, v2, v3, weight) in enumerate(
        raw
    ):
        if on_records is not None and n % PROGRESS_EVERY == 0:
            on_records(n)
        epoch = epochs.of(loader, t)
        if kind == K_WORKER_BATCH:
            if v0 < 0:
                continue
            # A worker's own track, or the main process's fetch track (num_workers=0).
            tid = pid if worker >= 0 else MAIN_FETCH_TID + loader
            args = {
                "batch": index,
                "loader": loader,
                "worker": worker,
                "epoch": epoch,
                "samples": count,
            }
            if v2 > 0:
                args["cpu_ms"] = round(v2 / 1e6, 3)
            if v3 >= 0:
                args["bytes"] = v3
            if flags & B_PROFILED:
                args["profiled"] = True
            if weight > 1:
                args["stands_for"] = weight  # a sample: this fetch and weight-1 before it
            yield (_span(f"fetch {index}", "fetch", pid, tid, t, v0, args))
            collate = v1 if 0 <= v1 <= v0 else 0
            # torch's fetch gets every sample, then collates them: getitem first.
            yield (
                _span(
                    f"getitem {index}",
                    "getitem",
                    pid,
                    tid,
                    t,
                    v0 - collate,
                    {"batch": index, "samples": count},
                )
            )
            if v1 >= 0:
                yield (
                    _span(
                        f"collate {index}",
                        "collate",
                        pid,
                        tid,
                        t + v0 - collate,
                        collate,
                        {"batch": index},
                    )
                )
        elif kind == K_MAIN_BATCH:
            tid = MAIN_LOOP_TID + loader
            wait = max(v0, 0)
            if v1 >= 0:
                # The consumer's step on the previous batch: from its hand-out to this ask.
                yield (
                    _span(
                        f"step {index - 1}",
                        "step",
                        pid,
                        tid,
                        t - v1,
                        v1,
                        {"batch": index - 1, "loader": loader, "epoch": epoch},
                    )
                )
            args = {"batch": index, "loader": loader, "worker": worker, "epoch": epoch}
            if v2 >= 0:
                args["pin_memory_ms"] = round(v2 / 1e6, 3)
            if weight > 1:
                args["stands_for"] = weight  # a sample: this hand-out and the weight-1 before it
            yield (_span(f"wait {index}", "wait", pid, tid, t, wait, args))
        elif kind == K_ITER_START:
            tid = MAIN_LOOP_TID + loader
            yield (
                _instant(
                    f"epoch {v3} starts",
                    pid,
                    tid,
                    t,
                    {"num_workers": worker, "batch_size": count or None},
                )
            )
        elif kind == K_ITER_END:
            tid = MAIN_LOOP_TID + loader
            yield (
                _instant(
                    f"epoch {v1} ends ({END_REASONS.get(v0, v0)})", pid, tid, t, {"batches": index}
                )
            )
        elif kind == K_WORKER_START:
            yield (_instant("worker starts", pid, pid, t, {"worker": worker}))
        elif kind == K_WORKER_EXIT:
            yield (_instant("worker exits", pid, pid, t, {"batches": v0, "raised": bool(v1)}))
        elif kind == K_WORKER_DRAINED:
            yield (_instant("its data ran out", pid, pid, t, {"worker": worker, "batches": v0}))
        elif kind == K_WORKER_EXCEPTION:
            yield (_instant(f"exception in batch {index}", pid, pid, t, {"batch": index}))
        elif kind == K_WORKER_DIED:
            tid = MAIN_LOOP_TID + loader
            how = f"signal {v1}" if v1 > 0 else f"exit code {v0}"
            yield (
                _instant(
                    f"worker {worker} died ({how})", pid, tid, t, {"worker": worker, "pid": v2}
                )
            )


def _span(name, cat, pid, tid, t_ns, dur_ns, args) -> dict:
    return {
        "name": name,
        "cat": cat,
        "ph": "X",
        "pid": pid,
        "tid": tid,
        "ts": _us(t_ns),
        "dur": _us(max(dur_ns, 0)),
        "args": args,
    }


def _instant(name, pid, tid, t_ns, args) -> dict:
    return {
        "name": name,
        "ph": "i",
        "s": "t",
        "pid": pid,
        "tid": tid,
        "ts": _us(t_ns),
        "args": args,
    }


def _counters(trace: dict, worker_of_pid: dict, main_pids: set):
    machine = sorted(trace.get("machine") or [], key=lambda m: m[0])
    for t, cpu_busy, shm_used, shm_total, mem_available in machine:
        ts = _us(t)
        if shm_used is not None:
            args = {"used": round(shm_used / 2**20, 3)}
            if shm_total is not None:
                args["free"] = round((shm_total - shm_used) / 2**20, 3)
            yield (
                {"name": "/dev/shm (MiB)", "ph": "C", "pid": MACHINE_PID, "ts": ts, "args": args}
            )
        if mem_available is not None:
            yield (
                {
                    "name": "available memory (MiB)",
                    "ph": "C",
                    "pid": MACHINE_PID,
                    "ts": ts,
                    "args": {"available": round(mem_available / 2**20, 1)},
                }
            )
        if cpu_busy is not None:
            yield (
                {
                    "name": "CPU busy (% of all CPUs)",
                    "ph": "C",
                    "pid": MACHINE_PID,
                    "ts": ts,
                    "args": {"busy": round(cpu_busy, 2)},
                }
            )
    # NVML's utilization is the share of time a kernel was running, not how busy the GPU was.
    for t, index, util, used, job in sorted(trace.get("gpus") or [], key=lambda g: (g[0], g[1])):
        ts = _us(t)
        if util is not None:
            yield (
                {
                    "name": f"GPU {index}: kernel running (% of time)",
                    "ph": "C",
                    "pid": GPU_PID,
                    "ts": ts,
                    "args": {"utilization": round(util, 1)},
                }
            )
        if used is not None:
            args = {"used": round(used / 2**20, 1)}
            if job is not None:
                args["job"] = round(job / 2**20, 1)
            yield (
                {
                    "name": f"GPU {index}: memory (MiB)",
                    "ph": "C",
                    "pid": GPU_PID,
                    "ts": ts,
                    "args": args,
                }
            )
    # Per-process CPU on the process's own track: only those the events named.
    for t, pid, _state, cpu in sorted(trace.get("processes") or [], key=lambda p: p[0]):
        if cpu is None or (pid not in worker_of_pid and pid not in main_pids):
            continue
        yield (
            {
                "name": "CPU (% of a core)",
                "ph": "C",
                "pid": pid,
                "ts": _us(t),
                "args": {"cpu": round(cpu, 2)},
            }
        )


def write(path: str, trace: dict | None, report=None) -> None:
    """Writes the trace to `path` ('-' for stdout), one event per line, as it is made."""
    if trace is None:
        raise DldoctorError("no trace was recorded (the monitor kept no events)")
    total = len(trace.get("events") or [])
    progress = None
    if total > PROGRESS_ABOVE and path != "-" and sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import Progress

        progress = Progress(console=Console(file=sys.stderr), transient=True)
        task = progress.add_task(f"dldoctor: writing the trace ({total:,} records)", total=total)
        progress.start()
    on_records = (lambda n: progress.update(task, completed=n)) if progress else None
    other, events = _stream(trace, report, on_records)
    try:
        if path == "-":
            _dump(sys.stdout, other, events)
            return
        with open(path, "w", encoding="utf-8") as f:
            _dump(f, other, events)
    except OSError as e:
        raise DldoctorError(f"cannot write the trace to {path}: {e.strerror}") from None
    finally:
        if progress is not None:
            progress.stop()


def _dump(f, other: dict, events) -> None:
    # One event per line: a large trace stays greppable, and nothing holds it all in memory.
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    f.write('{"displayTimeUnit":"ms","otherData":' + dumps(other) + ',"traceEvents":[')
    sep = "\n"
    for e in events:
        f.write(sep + dumps(e))
        sep = ",\n"
    f.write("\n]}\n")
