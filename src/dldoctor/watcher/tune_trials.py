"""The trials of `dldoctor tune`: each is one run of the job under the watcher with its
settings overridden (`dldoctor run --set`'s hook), measured as the training loop sees it and
ended (its whole process group: SIGTERM, then SIGKILL) as soon as its throughput is known.

Throughput is batches handed to the loop per second, counted from the first batch over
whole seconds (longer bins, up to 5 s, for a loader of a few batches a second), so each
epoch's worker start-up counts (for many short epochs that is the cost being tuned). A trial ends once the 95 % interval of its per-second rates is within
±CI_TARGET of their mean (at least MIN_S of rates), or at its time limit; a trial whose job
fails (exits non-zero, hangs, hands out no batch) is reported as failed with the reason.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from ..job import settings as _settings

POLL_S = 0.25
CI_TARGET = 0.05  # the trial ends when its 95 % interval is within ±5 % of its mean
Z95 = 1.96
MIN_S = 4.0  # per-second rates at least, before the interval is trusted
BIN_BATCHES = 8  # a rate spans at least this many batches (up to BIN_MAX_S seconds)
BIN_MAX_S = 5.0
KILL_GRACE_S = 3.0  # SIGTERM, then SIGKILL after this
FIRST_BATCH_S = 60.0  # no batch by then: the trial failed (spawned workers import torch)


@dataclass
class Trial:
    settings: dict  # by DataLoader keyword; {} the job's own
    batches_per_s: float | None = None
    ci: float | None = None  # half-width of the 95 % interval, batches/s
    seconds: float = 0.0  # the whole trial, start-up included
    outcome: str = "ok"  # "ok" or "failed"
    reason: str = ""  # why it failed
    rates: list[float] = field(default_factory=list)
    main_cpu_cores: float | None = None  # the main processes' CPU while it was measured
    report: object = None  # the diagnostic run's Report (the first trial only)

    def to_dict(self) -> dict:
        d = {
            "settings": dict(self.settings),
            "batches_per_s": self.batches_per_s,
            "ci": self.ci,
            "seconds": round(self.seconds, 2),
            "outcome": self.outcome,
        }
        if self.reason:
            d["reason"] = self.reason
        return d


def interval(rates: list[float]) -> tuple[float, float] | None:
    """(mean, half-width of its 95 % interval) of per-second rates; None with fewer than 2."""
    n = len(rates)
    if n < 2:
        return None
    mean = sum(rates) / n
    var = sum((r - mean) ** 2 for r in rates) / (n - 1)
    return mean, Z95 * math.sqrt(var / n)


def _bin_s(marks: list[tuple[float, int]], now: float, total: int) -> float:
    """Seconds per rate: one, or long enough for BIN_BATCHES batches at the rate so far
    (a loader of one or two batches a second would otherwise count whole batches per bin,
    and its interval would measure the counting, not the loader)."""
    t0, b0 = marks[0]
    if now - t0 < 2.0 or total <= b0:
        return 1.0
    rate = (total - b0) / (now - t0)
    return min(BIN_MAX_S, max(1.0, BIN_BATCHES / rate))


def _end(child: subprocess.Popen) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(child.pid, sig)
        except ProcessLookupError:
            break
        try:
            child.wait(timeout=KILL_GRACE_S)
            break
        except subprocess.TimeoutExpired:
            continue
    try:  # anything the job left behind in its group
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _failure_reason(report, code: int) -> str:
    crit = [f for f in (report.findings if report else []) if f.get("severity") == "critical"]
    why = f"{crit[0]['id']}: {crit[0]['title']}" if crit else ""
    code_text = f"exit code {code}" if code >= 0 else f"killed by signal {-code}"
    return f"the job failed ({code_text})" + (f": {why}" if why else "")


def run_trial(
    cmd: list[str],
    overrides: dict,
    max_s: float,
    min_s: float = MIN_S,
    diagnostic: bool = False,
    hang_timeout_s: float = 30.0,
) -> Trial:
    """One run of `cmd` with `overrides` ({scope: {key: value}}, as settings.parse gives),
    measured until its throughput is known or `max_s` has passed since its first batch."""
    from .watcher import Watcher

    trial = Trial(settings=dict(overrides.get(_settings.ALL) or {}))
    watcher = Watcher(hang_timeout_s=hang_timeout_s)
    log = tempfile.TemporaryFile()
    start = time.monotonic()
    child = None
    try:
        watcher.collect_facts()
        env = watcher.child_env()
        if overrides:
            env[_settings.ENV] = _settings.to_env(overrides)
        else:
            env.pop(_settings.ENV, None)
        try:
            child = subprocess.Popen(
                cmd,
                env=env,
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        except OSError as e:
            trial.outcome, trial.reason = "failed", f"cannot start {cmd[0]}: {e.strerror}"
            return trial
        watcher.start(child.pid)
        first_t = None
        marks: list[tuple[float, int]] = []  # (t, batches) each whole second from the first
        main_cpu: list[float] = []  # the main processes' CPU (cores) at each poll after it
        code = None
        while True:
            try:
                code = child.wait(timeout=POLL_S)
            except subprocess.TimeoutExpired:
                pass
            watcher.poll()
            now = time.monotonic()
            live = watcher.monitor.live()
            total = sum(int(x.get("batches") or 0) for x in live["loaders"])
            if first_t is not None:
                cpu = [p.get("cpu_pct") for p in live["processes"] if p.get("role") == "main"]
                if cpu and all(c is not None for c in cpu):
                    main_cpu.append(sum(cpu) / 100.0)
            if first_t is None and total > 0:
                # The batches of the first poll count: a short epoch can come whole in it.
                first_t = now
                marks.append((now - POLL_S, 0))
            elif first_t is not None and now - marks[-1][0] >= _bin_s(marks, now, total):
                marks.append((now, total))
            trial.rates = [(b1 - b0) / (t1 - t0) for (t0, b0), (t1, b1) in zip(marks, marks[1:])]
            if code is not None:
                break
            if watcher.new_hang() is not None:
                trial.outcome, trial.reason = (
                    "failed",
                    "the job hung (no batch for the hang timeout)",
                )
                break
            if first_t is None and now - start > FIRST_BATCH_S:
                trial.outcome, trial.reason = "failed", f"no batch in {FIRST_BATCH_S:.0f} s"
                break
            if first_t is not None:
                got = interval(trial.rates)
                ran = now - first_t
                if ran >= max_s:
                    break
                if got and ran >= min_s and got[0] > 0 and got[1] <= CI_TARGET * got[0]:
                    break
        if code is None:
            _end(child)
        report = None
        if diagnostic or (code not in (None, 0)):
            try:
                report = watcher.finish(command=cmd, exit_code=code)
            except Exception:
                report = None
        else:
            watcher.monitor.stop()
        trial.report = report if diagnostic else None
        if code not in (None, 0) and trial.outcome == "ok":
            trial.outcome, trial.reason = "failed", _failure_reason(report, code)
            log.seek(0)
            tail = log.read()[-2000:].decode("utf-8", "replace").strip().splitlines()
            if tail and not trial.reason.count(":") > 1:
                trial.reason += f" ({tail[-1][:200]})"
        got = interval(trial.rates)
        if main_cpu:
            trial.main_cpu_cores = sum(main_cpu) / len(main_cpu)
        if trial.outcome == "ok":
            if got is None:
                trial.outcome, trial.reason = "failed", "too few batches to measure"
            else:
                trial.batches_per_s, trial.ci = got
        return trial
    finally:
        trial.seconds = time.monotonic() - start
        if child is not None and child.poll() is None:
            _end(child)
        log.close()
        try:
            watcher.monitor.stop()
        except Exception:
            pass
        watcher.cleanup()


def profile(report, baseline: Trial) -> dict:
    """What the diagnostic run measured, as analyze/tune reads it (`_ext.tune_next`): the
    busiest loader's settings, and the figures of the finding that names its bottleneck."""
    loaders = sorted(report.loaders or [], key=lambda x: -(x.get("batches") or 0))
    lo = loaders[0] if loaders else {}
    p = {
        "num_workers": int(lo.get("num_workers") or 0),
        "prefetch_factor": lo.get("prefetch_factor") or 2,
        "persistent_workers": bool(lo.get("persistent_workers")),
        "usable_cpus": (report.system or {}).get("usable_cpus"),
        "batches_per_s": baseline.batches_per_s,
        "keeps_up": report.verdict in ("healthy", "main_process_bound"),
    }
    if lo.get("fetch_p50_ms"):
        p["fetch_s"] = lo["fetch_p50_ms"] / 1e3
    if lo.get("consumer_step_ms"):
        p["step_s"] = lo["consumer_step_ms"] / 1e3
    if lo.get("worker_on_cpu_fraction") is not None:
        p["per_worker_cpu"] = lo["worker_on_cpu_fraction"]
    handover_bound = False
    for f in report.findings:
        ev = f.get("evidence") if isinstance(f.get("evidence"), dict) else {}
        fid = f["id"]
        if fid in ("slow_getitem", "slow_collate", "too_many_workers"):
            p.setdefault("cpu_workers", ev.get("recommended_num_workers") or p["num_workers"])
            for key, name in (
                ("cpu_left", "cpu_left_for_workers"),
                ("main_cpu_cores", "main_process_cpu_cores"),
            ):
                if isinstance(ev.get(name), (int, float)):
                    p.setdefault(key, ev[name])
            if isinstance(ev.get("worker_on_cpu_fraction"), (int, float)):
                p["per_worker_cpu"] = ev["worker_on_cpu_fraction"]
            if isinstance(ev.get("consumer_demand_batches_per_s"), (int, float)):
                p["step_s"] = 1.0 / max(ev["consumer_demand_batches_per_s"], 1e-9)
        elif fid == "io_bound":
            p["off_cpu"] = True
        elif fid == "worker_startup_cost":
            p["startup_bound"] = True
        elif fid == "thread_oversubscription":
            p["thread_oversubscribed"] = True
        elif fid == "slow_handover":
            handover_bound = True
    if p.get("per_worker_cpu") is not None and p["per_worker_cpu"] < 0.5 and "cpu_workers" not in p:
        # Workers idle half their fetch wait on I/O, unless the loop waits for batches they
        # already made (slow_handover): then more of them only add hand-overs.
        p["off_cpu"] = not p["keeps_up"] and not handover_bound
    return {k: (int(v) if k == "cpu_workers" else v) for k, v in p.items() if v is not None}


def progress(text: str) -> None:
    print(f"dldoctor tune: {text}", file=sys.stderr, flush=True)
