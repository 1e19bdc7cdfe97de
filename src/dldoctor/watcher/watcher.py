"""The watching side of a run: the run directory, the event ring, the C++ monitor (ring
drain + /proc sampler + analyzer on their own threads), the side logs, and the report.

Used by `dldoctor run` (the job is a child process) and by `dldoctor.watch()` (the job is
this process). Everything that runs per event or per sample lives in C++; this class only
starts it, feeds it the rare side-log records, and turns its output into a Report.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time

from .. import report as _report
from ..errors import DldoctorError
from ..ranks import RANK_VARS
from . import failure_notes as _failure_notes
from .sidelog_tail import SideLogTail

RING_CAPACITY = 1 << 16  # 4 MiB of 64-byte events: ~10 s of a 6,000 batches/s worst case
SAMPLE_INTERVAL_S = 0.1  # DESIGN.md section 3: every 100 ms
# The streaming verdict is asked for once a second: the recent window is 10 s long, so a
# faster look sees nothing new and costs the watcher CPU (findings() takes the analyzer lock).
NAMED_EVERY_NS = 1_000_000_000
_PKG_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INJECT_DIR = os.path.join(_PKG_DIR, "_inject")


class Watcher:
    """Owns one run's ring, monitor and side logs."""

    def __init__(
        self,
        keep_run_dir: bool = False,
        hang_timeout_s: float | None = None,
        trace_max_events: int = 0,
    ):
        from .. import _ext

        if hang_timeout_s is not None and not hang_timeout_s > 0:
            raise DldoctorError(
                f"--hang-timeout must be a positive number of seconds, not {hang_timeout_s}"
            )
        self.run_dir = tempfile.mkdtemp(prefix="dldoctor-")
        self.keep_run_dir = keep_run_dir or bool(os.environ.get("DLDOCTOR_KEEP_RUN_DIR"))

        def monitor(ring_path: str):
            return _ext.Monitor(
                ring_path,
                RING_CAPACITY,
                SAMPLE_INTERVAL_S,
                run_dir=self.run_dir,
                hang_timeout_s=hang_timeout_s,
                trace_max_events=trace_max_events,
            )

        # The ring in memory (""): a file on the run directory's disk would be written back
        # every few seconds and each page then faults on the job's next event into it
        # (EventRing::create_in_memory). A file only where the kernel has no memfd.
        try:
            self.monitor = monitor("")
        except _ext.CoreError:
            self.monitor = monitor(os.path.join(self.run_dir, "events.ring"))
        self.ring_path = self.monitor.ring_path
        self._hangs_seen = 0
        self._next_named_ns = 0
        self.side = SideLogTail(self.run_dir)
        self.failures = _failure_notes.FailureNotes(self.monitor, self.run_dir)
        self.side_records: list[dict] = []
        self.ranks: dict[int, dict] = {}  # loader id -> its main process's rank (multi-rank)
        self.facts: dict = {}
        self.started_ns: int | None = None
        self._first_named: str | None = None
        self._decided: dict | None = None  # the last streaming decision (streaming())
        self._decided_until_ns = 0
        # The early notices printed while the job ran ({id, title, seen_s, held_until_s}):
        # the final report names each one it does not confirm.
        self.notices: list[dict] = []

    # -- setup -----------------------------------------------------------------------
    def child_env(self, base: dict | None = None) -> dict:
        """The environment that instruments every Python process the command starts."""
        env = dict(os.environ if base is None else base)
        old = env.get("PYTHONPATH")
        env["PYTHONPATH"] = INJECT_DIR + (os.pathsep + old if old else "")
        env["DLDOCTOR_RING"] = self.ring_path
        env["DLDOCTOR_RUN_DIR"] = self.run_dir
        return env

    def collect_facts(self) -> dict:
        """The machine's facts, read in C++ and handed to the analysis there; the dict is
        what the report's `system` section shows."""
        try:
            self.facts = self.monitor.collect_facts()
        except Exception as e:  # facts are best effort: the analysis degrades, the job runs
            self.facts = {}
            self.notes_extra = [f"machine facts could not be read: {e}"]
        return self.facts

    def start(self, root_pid: int) -> None:
        self.started_ns = time.monotonic_ns()
        self.monitor.start(root_pid)

    # -- while running ---------------------------------------------------------------
    def poll(self, final: bool = False) -> None:
        """Feed new side-log records (profiles of __getitem__, exceptions) to the analyzer.
        `final`: the run's last poll, which reads every side log to its end."""
        self.failures.poll()
        for rec in self.side.poll(everything=final):
            self.side_records.append(rec)
            self.failures.on_record(rec)
            if rec.get("type") == "iter_start" and rec.get("loader") is not None:
                threads = rec.get("threads") or {}
                names = list(threads.get("non_daemon") or []) + list(threads.get("daemon") or [])
                self.monitor.set_loader_notes(
                    int(rec["loader"]),
                    collate_fn=(rec.get("collate_fn") or "") if rec.get("custom_collate") else "",
                    worker_init_fn=rec.get("worker_init_fn") or "",
                    main_threads=threads.get("active"),
                    main_thread_names=[str(n) for n in names],
                )
                rank = {k: rec[k] for k in RANK_VARS if isinstance(rec.get(k), int)}
                if rank:
                    self.monitor.note_rank(int(rec["loader"]), **rank)
                    self._note_rank(int(rec["loader"]), rank)
            if rec.get("type") == "profile" and rec.get("loader") is not None:
                functions = [f for f in rec.get("functions") or [] if _user_function(f)]
                self.monitor.add_hot_functions(int(rec["loader"]), functions)
                if isinstance(rec.get("torch_threads"), int) and isinstance(rec.get("pid"), int):
                    self.monitor.note_torch_threads(rec["pid"], rec["torch_threads"])
            if rec.get("type") == "dataset" and rec.get("loader") is not None:
                self.monitor.note_dataset(int(rec["loader"]), rec)
            if rec.get("type") == "slow_batch" and rec.get("loader") is not None:
                self.monitor.note_slow_batch(int(rec["loader"]), rec)

    def _note_rank(self, loader: int, rank: dict) -> None:
        """The live view's loader names: its rank and its number among that rank's loaders."""
        shown = rank.get("rank", rank.get("local_rank"))
        same = [i for i, r in self.ranks.items() if r.get("shown") == shown and i != loader]
        self.ranks[loader] = {
            **rank,
            "shown": shown,
            "rank_loader": 1 + sum(1 for i in same if i < loader),
        }

    def streaming(self) -> dict:
        """The streaming decision ({verdict, findings} over the recent window), made at most
        once every NAMED_EVERY_NS and shared by the notices, the risks and the live view:
        each rules pass reads the window's batches again."""
        now = time.monotonic_ns()
        if self._decided is None or now >= self._decided_until_ns:
            self._decided = self.monitor.decide(False)
            self._decided_until_ns = now + NAMED_EVERY_NS
        return self._decided

    def streaming_verdict(self) -> tuple[str, dict | None]:
        decided = self.streaming()
        verdict, findings = decided["verdict"], decided["findings"]
        top = findings[0] if findings and verdict not in ("healthy", "unknown") else None
        return verdict, top

    def newly_named(self) -> dict | None:
        """The first critical finding of the run, once: for an early one-line notice. Later
        looks only follow whether the notice still holds (for the final report's word on it)."""
        now = time.monotonic_ns()
        if now < self._next_named_ns:
            return None
        self._next_named_ns = now + NAMED_EVERY_NS
        if self._first_named is not None and not self.notices:
            return None
        decided = self.streaming()
        verdict, findings = decided["verdict"], decided["findings"]
        t_s = round((now - (self.started_ns or now)) / 1e9, 1)
        held = {f["id"] for f in findings if f.get("severity") == "critical"}
        for n in self.notices:
            if n["id"] in held:
                n["held_until_s"] = t_s
        if self._first_named is not None:
            return None
        if not findings or verdict in ("healthy", "unknown"):
            return None
        top = findings[0]
        self._first_named = verdict
        self.notices.append(
            {"id": top["id"], "title": top["title"], "seen_s": t_s, "held_until_s": t_s}
        )
        return {**top, "seen_s": t_s}  # the time the notice line and the report both say

    def new_risks(self) -> list[dict]:
        """Warnings of a failure to come (/dev/shm, fds, GPU memory), each once, while the
        job still runs."""
        return self.failures.new_risks(lambda: self.streaming()["findings"])

    def new_hang(self) -> dict | None:
        """The hang doctor's newest capture and findings, once per hang."""
        n = self.monitor.hangs
        if n <= self._hangs_seen:
            return None
        self._hangs_seen = n
        return self.monitor.last_hang()

    def hang_report(self, command=None) -> _report.Report:
        """A report written at a hang, while the job is still stuck."""
        report = self._build(command=command, exit_code=None)
        report.notes.append("the job was still stuck when this report was written")
        return report

    # -- end -------------------------------------------------------------------------
    def finish(self, command=None, exit_code=None) -> _report.Report:
        self.monitor.stop()
        self.poll(final=True)
        return self._build(command, exit_code)

    def _build(self, command, exit_code) -> _report.Report:
        # Decided in C++: the order, the verdict, and the hang's diagnosis merged in.
        decided = self.monitor.decide(True)
        hang = self.monitor.last_hang()
        loaders = self.monitor.loaders()
        # A multi-rank job's loaders by rank, then by their number in it (ids are job-wide).
        loaders.sort(key=lambda ld: (ld.get("rank", -1), ld.get("rank_loader", 0), ld["id"]))
        report = _report.Report(
            verdict=decided["verdict"],
            findings=decided["findings"],
            system=_report.system_section(self.facts),
            loaders=loaders,
            command=list(command) if command is not None else None,
            exit_code=exit_code,
            hang=_report.hang_section(hang, self.monitor.hang_timeout_s) if hang else None,
        )
        report.series = _report.series_section(self.monitor.series())
        report.notices = resolve_notices(self.notices, report.findings)
        report.notes.extend(notice_notes(report.notices, report.findings))
        report.settings_overridden = settings_overridden(self.side_records)
        for s in report.settings_overridden:
            report.notes.append(settings_note(s))
        report.notes.extend(getattr(self, "notes_extra", []))
        if decided["note"]:  # why the verdict is unknown: no DataLoader, or too short a run
            report.notes.append(decided["note"])
        dropped = self.monitor.dropped
        if dropped:
            report.notes.append(f"{dropped} events were dropped (the event ring was full)")
        return report

    def cleanup(self) -> None:
        if not self.keep_run_dir:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self.monitor.stop()
        finally:
            self.cleanup()


# Frames of the machinery every fetch passes through: never the user's hot spot.
_FRAMEWORK_PATHS = (
    os.sep + os.path.join("torch", "utils", "data") + os.sep,
    os.path.join(_PKG_DIR, "job") + os.sep,
    os.path.join(_PKG_DIR, "_inject") + os.sep,
)


def _user_function(f: dict) -> bool:
    where = str(f.get("file") or f.get("location") or f.get("where") or "")
    name = str(f.get("name") or f.get("function") or "")
    if "<listcomp>" in name or "<genexpr>" in name:
        return False
    return not any(p in where for p in _FRAMEWORK_PATHS)


def resolve_notices(notices: list[dict], findings: list[dict]) -> list[dict]:
    """Each early notice with whether the report confirms it: a finding of its id at warning
    or critical over the whole run."""
    loud = {f["id"] for f in findings if f.get("severity") in ("critical", "warning")}
    return [{**n, "confirmed": n["id"] in loud} for n in notices]


def notice_notes(notices: list[dict], findings: list[dict]) -> list[str]:
    """The report's words on the early notices: one it does not confirm (notice_text), and
    one it confirms with other figures (notice_change_text): the notice measured the last
    seconds before it, the report the whole run, and the user saw both."""
    out = []
    for n in notices:
        if not n["confirmed"]:
            out.append(notice_text(n))
            continue
        f = next((f for f in findings if f.get("id") == n["id"]), None)
        if f is not None and f.get("title") and f["title"] != n["title"]:
            out.append(notice_change_text(n, f["title"]))
    return out


_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_UNIT_WORDS = {"ms", "s", "%", "MiB", "GiB", "CPUs", "workers", "batches"}


def notice_change_text(n: dict, title: str) -> str:
    """A confirmed notice whose figures the whole run changed: "early notice slow_getitem at
    7.3 s, over the 10 s before it: the loop wants 5 -> over the whole run: 7.4 (...)"."""
    from .. import _ext

    window = _ext.RECENT_WINDOW_S
    head = (
        f"early notice {n['id']} at {n['seen_s']} s measured the {window:g} s before it; "
        "the report measures the whole run"
    )
    old_nums, new_nums = _NUMBER.findall(n["title"]), _NUMBER.findall(title)
    same_words = _NUMBER.sub("#", n["title"]) == _NUMBER.sub("#", title)
    if same_words and len(old_nums) == len(new_nums):
        pieces = _NUMBER.split(title)
        changes = []
        for i, (a, b) in enumerate(zip(old_nums, new_nums)):
            if a != b:
                # The words before the figure, and its unit after it ("batches/s").
                before = " ".join(w for w in pieces[i].rstrip().split(" ")[-3:] if w)
                after = (pieces[i + 1].split() or [""])[0].rstrip(",;:)")
                unit = f" {after}" if "/" in after or after in _UNIT_WORDS else ""
                changes.append(f"{before.strip(',:;(')} {a} -> {b}{unit}".strip())
        return head + ": " + "; ".join(changes)
    return head + f': the notice said "{n["title"]}", the whole run "{title}"'


def notice_text(n: dict) -> str:
    """The report's word on a notice it does not confirm: what was seen, when, until when."""
    held = n.get("held_until_s")
    until = (
        f"no longer held after {held} s"
        if held is not None and held > n["seen_s"]
        else "not held after it was seen"
    )
    return (
        f"early notice {n['id']} ({n['title']}), seen at {n['seen_s']} s, {until}: the whole "
        f"run does not show it"
    )


def settings_overridden(records: list[dict]) -> list[dict]:
    """The `settings` records of `dldoctor run --set`, one per overridden loader and process:
    {"loader": creation order, "main_pid", "settings", "was", "not_applied"}."""
    out = []
    for rec in records:
        if rec.get("type") != "settings":
            continue
        out.append(
            {
                "loader": rec.get("loader"),
                "main_pid": rec.get("main_pid"),
                "settings": dict(rec.get("settings") or {}),
                "was": dict(rec.get("was") or {}),
                "not_applied": dict(rec.get("not_applied") or {}),
            }
        )
    return out


def settings_note(s: dict) -> str:
    def text(v):
        return str(v).lower() if isinstance(v, bool) else str(v)

    parts = [
        f"{k}={text(v)} (was {text(s['was'].get(k))})"
        if k in s["was"] and s["was"][k] is not None
        else f"{k}={text(v)}"
        for k, v in s["settings"].items()
    ]
    parts += [f"{k} not applied ({why})" for k, why in s["not_applied"].items()]
    return f"settings overridden (--set), loader {s['loader']} of process {s['main_pid']}: " + (
        ", ".join(parts) or "none"
    )


def command_not_found(cmd0: str) -> DldoctorError:
    err = DldoctorError(f"command not found: {cmd0}")
    err.exit_code = 127
    return err
