"""`dldoctor attach PID`: diagnose a job that was started without dldoctor, already running or
already stuck, without restarting it and without touching it: read-only, no signal, no pause.

The layers, as py-spy's: find the job from the pid (attach_find: /proc), read it (the C++
/proc sampler over its tree for the window), sample its stacks (attach_stacks: py-spy), decide
(the C++ attach session: the same rules, a JobView from the samples, the hang rules when the
tree is stuck) and write (the same Report, terminal, JSON, HTML).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time

from .. import report as _report
from . import attach_stacks as stacks
from .attach_find import EXIT_NO_DATALOADER, AttachError, Job, find_job

DEFAULT_SECONDS = 10.0
SAMPLE_INTERVAL_S = 0.1  # the /proc sampler, as under `dldoctor run`
POLL_S = 0.25
UNKNOWN_NOTE = (
    "attached without the hooks: per-batch times, batch sizes and bytes and batches/s are not "
    "measured (unknown); the stall and the workers' load are shares of sampled stacks"
)


class AttachRun:
    def __init__(self, pid: int, seconds: float, args=None):
        self.pid = pid
        self.seconds = seconds
        self.args = args
        self.refused: list[int] = []  # pids whose stacks py-spy could not read (ptrace)

    def _look(self, pid: int, with_locals: bool):
        d = stacks.dump(pid, with_locals)
        if d.permission and pid not in self.refused:
            self.refused.append(pid)
        return d.threads

    def run(self) -> int:
        from .. import _ext
        from ..reporters import terminal

        stacks.pyspy()  # before anything: a missing py-spy is one line, not a half run
        job = find_job(self.pid, self._look)
        if not job.mains:
            raise AttachError(
                f"pid {self.pid} ({job.target.command[:80]}) runs no DataLoader: "
                "no worker process and no Python process under it to sample",
                EXIT_NO_DATALOADER,
            )
        say(describe(job, self.seconds))
        if self.refused:
            say(
                f"cannot read the Python stacks of pid {self.refused[0]}: permission denied; "
                f"{stacks.PTRACE_FIX}. Going on with what /proc shows."
            )
        session = _ext.Attach([ld.as_dict() for ld in job.loaders], SAMPLE_INTERVAL_S)
        folder = tempfile.mkdtemp(prefix="dldoctor-attach-")
        try:
            session.start(sorted(job.mains))
            taken = self._sample(job, session, folder)
        finally:
            session.stop()
            shutil.rmtree(folder, ignore_errors=True)
        dropped = self._drop_unconfirmed(job, session)
        if not job.loaders:
            raise AttachError(
                no_loader_message(self.pid, job, taken, self.refused), EXIT_NO_DATALOADER
            )
        if dropped:
            session.keep_loaders([ld.loader for ld in job.loaders])
        hang = None
        if not self.refused and session.stuck_loaders():
            hang = self._capture(job, session)
        report = self._report(job, session, taken, hang)
        # The report to stdout (the job is not ours: its output is elsewhere); notices stderr.
        terminal.print_report(report, file=sys.stdout)
        if self.args is not None and getattr(self.args, "json", None):
            report.write_json(self.args.json)
        if self.args is not None and getattr(self.args, "html", None):
            from ..reporters import html

            html.write(self.args.html, report)
            say(f"HTML report written to {self.args.html}")
        return 0

    # -- sampling ----------------------------------------------------------------------------
    def _sample(self, job: Job, session, folder: str) -> dict:
        """Records every process's stacks for the window while the sampler reads /proc;
        returns {pid: Samples}."""
        pids = job.processes()
        rate = stacks.rate_for(len(pids))
        recorders = []
        if not self.refused:
            recorders = [stacks.Recorder(p, self.seconds, rate, folder) for p in pids]
        end = time.monotonic() + self.seconds
        try:
            while time.monotonic() < end:
                time.sleep(POLL_S)
                if not any(os.path.exists(f"/proc/{m}") for m in job.mains):
                    say("the job's main process ended during the window")
                    break
        except KeyboardInterrupt:
            say("interrupted: diagnosing what was sampled so far")
        for r in recorders:
            r.stop() if time.monotonic() < end else None
        out = {}
        for r in recorders:
            s = r.result()
            out[r.pid] = s
            if s.permission and r.pid not in self.refused:
                self.refused.append(r.pid)
            if s.frames:
                session.add_samples(r.pid, s.frames, s.threads, s.failed, 1000.0 / r.rate)
        self.rate = rate
        return out

    def _drop_unconfirmed(self, job: Job, session) -> list[int]:
        """Main processes without workers whose samples never entered a DataLoader: no
        loader of theirs was seen."""
        tallies = {t["pid"]: t for t in session.tallies()}
        dropped = []
        for ld in list(job.loaders):
            if ld.main_pid not in job.unconfirmed:
                continue
            places = (tallies.get(ld.main_pid) or {}).get("places") or {}
            if not any(places.get(p) for p in ("in_loader", "getitem", "collate", "reading")):
                job.loaders.remove(ld)
                job.mains.pop(ld.main_pid, None)
                dropped.append(ld.loader)
        return dropped

    def _capture(self, job: Job, session) -> dict:
        """One full look at every thread of the stuck tree, and the hang rules over it."""
        dumps, notes = {}, {}
        for pid in job.processes():
            d = stacks.dump(pid)
            if d.threads is not None:
                dumps[pid] = d.threads
            else:
                notes[pid] = f"py-spy: {d.error}"
        at_fork = {}
        for ld in job.loaders:
            if ld.start_method == "fork" and ld.main_pid in dumps:
                at_fork[ld.main_pid] = threads_older_than_workers(ld, dumps[ld.main_pid])
        return session.capture_hang(dumps, notes, at_fork)

    # -- the report --------------------------------------------------------------------------
    def _report(self, job: Job, session, taken: dict, hang: dict | None) -> _report.Report:
        decided = session.decide()
        facts = session.facts()
        loaders = session.loaders()
        by_id = {ld.loader: ld for ld in job.loaders}
        for d in loaders:
            ld = by_id.get(d["id"])
            if ld is not None:
                d.update(job.ranks.get(ld.main_pid) or {})
                d["dataset_type"] = ld.dataset or None
        report = _report.Report(
            verdict=decided["verdict"],
            findings=decided["findings"],
            system=_report.system_section(facts),
            loaders=loaders,
            command=job.target.cmdline or None,
            exit_code=None,
        )
        report.notes.append(UNKNOWN_NOTE)
        failed = sum(s.failed for s in taken.values())
        if failed:
            report.notes.append(f"{failed} stack samples could not be read (counted, not guessed)")
        if self.refused:
            report.notes.append(
                "the Python stacks could not be read (permission denied): only what /proc "
                f"shows was diagnosed; {stacks.PTRACE_FIX}"
            )
        if hang is not None:
            report.notes.append(
                f"the job made no progress over the {self.seconds:g} s watched: stuck at least that long"
            )
            report.hang = _report.hang_section(hang, self.seconds)
        report.series = _report.series_section(session.series())
        report.attach = attach_section(
            job, self.seconds, getattr(self, "rate", 0), session, self.refused
        )
        return report


# The loader's own threads in the main process: they start with or after the workers.
_LOADER_THREADS = ("QueueFeederThread", "_serve", "pin_memory", "_pin_memory_loop")


def threads_older_than_workers(ld, threads: list) -> list[str]:
    """The main process's Python threads (not its main thread, not the loader's own) that
    started before its first worker: they were running when fork copied their locks."""
    first_worker = min(
        (t for t in map(start_ticks, filter(None, ld.worker_pids)) if t), default=None
    )
    if first_worker is None:
        return []
    names = []
    for t in threads:
        tid, name = t.get("os_thread_id"), str(t.get("thread_name") or "")
        if not tid or tid == ld.main_pid or any(n in name for n in _LOADER_THREADS):
            continue
        started = start_ticks(ld.main_pid, tid)
        if started is not None and started <= first_worker:
            names.append(name)
    return names


def start_ticks(pid: int, tid: int | None = None) -> int | None:
    """When a process (or one of its threads) started, in clock ticks since boot."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    try:
        with open(path) as f:
            return int(f.read().rpartition(")")[2].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def say(line: str) -> None:
    print(f"dldoctor: {line}", file=sys.stderr, flush=True)


def describe(job: Job, seconds: float) -> str:
    workers = sum(len([p for p in ld.worker_pids if p]) for ld in job.loaders)
    parts = [f"attached to pid {job.pid} ({job.target.command[:60]})"]
    if job.agent is not None:
        parts.append(f"under the agent {job.agent.pid}")
    ranks = [r["rank"] for r in job.ranks.values() if "rank" in r]
    n = len(job.mains)
    if not workers:
        found = f"no DataLoader worker; sampling {n} Python process{'es' if n != 1 else ''} "
        found += "for a DataLoader that runs in-process"
        return ", ".join(parts) + f": {found}; watching for {seconds:g} s"
    found = f"{n} main process{'es' if n != 1 else ''}"
    if ranks:
        found += " (rank " + ", ".join(str(r) for r in sorted(ranks)) + ")"
    found += f", {workers} DataLoader worker{'s' if workers != 1 else ''}"
    return ", ".join(parts) + f": {found}; watching for {seconds:g} s"


def no_loader_message(pid: int, job: Job, taken: dict, refused: list[int]) -> str:
    if refused:
        return (
            f"pid {pid} ({job.target.command[:60]}) has no DataLoader worker, and its stacks "
            f"could not be read to look for a loader running in-process: {stacks.PTRACE_FIX}"
        )
    n = sum(s.taken for s in taken.values())
    return (
        f"pid {pid} ({job.target.command[:60]}) runs no DataLoader: no worker process, and "
        f"none of its {n} stack samples was inside a DataLoader"
    )


def attach_section(job: Job, seconds: float, rate: int, session, refused: list[int]) -> dict:
    """What attaching found and how it looked, for the JSON report."""
    tallies = {t["pid"]: t for t in session.tallies()}
    processes = []
    if job.agent is not None:
        processes.append({"pid": job.agent.pid, "role": "agent", "command": job.agent.command})
    for pid, proc in sorted(job.mains.items()):
        processes.append(
            {
                "pid": pid,
                "role": "main",
                "command": proc.command,
                **(job.ranks.get(pid) or {}),
                "stacks": tallies.get(pid),
            }
        )
    for ld in job.loaders:
        for wid, pid in enumerate(ld.worker_pids):
            if pid:
                processes.append(
                    {
                        "pid": pid,
                        "role": "worker",
                        "loader": ld.loader,
                        "worker": wid,
                        "main_pid": ld.main_pid,
                        "stacks": tallies.get(pid),
                    }
                )
    return {
        "pid": job.pid,
        "seconds": seconds,
        "stack_rate_hz": rate,
        "stacks_readable": not refused,
        "sampler_passes": session.passes,
        "processes": processes,
    }
