"""The live view of `dldoctor run --live`: a terminal panel redrawn about twice a second,
like `top` for the loader: per loader batches/s and data stall, per worker CPU, state and
recent getitem time, shm and memory bars, a line per GPU (the share of time a kernel ran,
its memory and the job's, from NVML; or why the GPU is not measured), and the verdict as it
stands.

The one reporter that reads a live process: the monitor's current figures (C++, a copy
under a short lock), never the job itself. The job's own output goes through a
pseudo-terminal and is printed above the panel, so the two do not overwrite each other.
"""

from __future__ import annotations

import codecs
import os
import queue
import sys
import threading
import time

from rich.console import Console, Group
from rich.live import Live
from rich.text import Text

from ..report import loader_label

REFRESH_S = 0.5  # "about twice a second"
# The streaming verdict looks at the last ~10 s: recomputing it every 2 s is plenty, and it
# is the costliest figure of a frame (every rule over the recent window).
VERDICT_EVERY_S = 2.0
BAR = 20  # characters of a full bar
STATE_STYLE = {"R": "bold green", "S": "dim", "D": "bold yellow", "Z": "bold red", "T": "magenta"}
STATE_NAME = {"R": "running", "S": "sleeping", "D": "I/O wait", "Z": "zombie", "T": "stopped"}


def _bar(frac: float | None, width: int = BAR, style: str = "cyan") -> Text:
    if frac is None:
        return Text("?".ljust(width), style="dim")
    frac = min(max(frac, 0.0), 1.0)
    full = int(round(frac * width))
    t = Text("█" * full, style=style)
    t.append("░" * (width - full), style="dim")
    return t


def _size(n: float | None) -> str:
    if n is None:
        return "?"
    for unit, div in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= div:
            return f"{n / div:.1f} {unit}"
    return f"{n:.0f} B"


def _pct(v: float | None, spec: str = "{:.0f}%") -> str:
    return "-" if v is None else spec.format(v)


class LiveView:
    """A rich Live panel over a Watcher; `tick()` from the run's wait loop redraws it."""

    def __init__(self, watcher, command: list[str], console: Console | None = None):
        self.watcher = watcher
        self.command = command
        self.console = console or Console(file=sys.stderr)
        self.live: Live | None = None
        self.started = time.monotonic()
        self._last_draw = 0.0
        self._verdict_at = 0.0
        self._verdict: tuple[str, dict | None] = ("unknown", None)
        self._lines: queue.SimpleQueue[str] = queue.SimpleQueue()
        self._relay: threading.Thread | None = None
        self._master_fd: int | None = None
        self.frames = 0

    @property
    def usable(self) -> bool:
        """A live panel needs a terminal to redraw in."""
        return self.console.is_terminal

    # -- the job's output ----------------------------------------------------------------
    def job_output(self) -> int | None:
        """A pseudo-terminal for the job's stdout and stderr (returns the job's end; the
        caller closes it once the job started). The job still sees a terminal, so its own
        buffering and colours stay as they would be without dldoctor."""
        import fcntl
        import pty
        import struct
        import termios

        master, slave = pty.openpty()
        try:
            size = os.get_terminal_size(self.console.file.fileno())
            fcntl.ioctl(
                slave, termios.TIOCSWINSZ, struct.pack("HHHH", size.lines, size.columns, 0, 0)
            )
        except (OSError, ValueError, AttributeError):
            pass
        self._master_fd = master
        self._relay = threading.Thread(
            target=self._read_job, name="dldoctor-live-relay", daemon=True
        )
        self._relay.start()
        return slave

    def _read_job(self) -> None:
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        pending = ""
        while True:
            try:
                chunk = os.read(self._master_fd, 65536)
            except OSError:  # EIO: every writer closed its end
                break
            if not chunk:
                break
            pending += decoder.decode(chunk)
            *lines, pending = pending.split("\n")
            for line in lines:
                # A progress bar redraws its line with \r: keep what the line ended as.
                self._lines.put(line.rstrip("\r").rsplit("\r", 1)[-1])
        if pending:
            self._lines.put(pending.rsplit("\r", 1)[-1])
        self._lines.put(None)

    def _flush_job_lines(self) -> None:
        while True:
            try:
                line = self._lines.get_nowait()
            except queue.Empty:
                return
            if line is None:
                continue
            self.console.print(Text.from_ansi(line), soft_wrap=True, highlight=False)

    # -- the panel ----------------------------------------------------------------------
    def __enter__(self):
        self.live = Live(
            self.render(),
            console=self.console,
            auto_refresh=False,
            transient=True,
            redirect_stdout=True,
            redirect_stderr=True,
        )
        self.live.start(refresh=True)
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def stop(self) -> None:
        if self._relay is not None:
            self._relay.join(timeout=2.0)  # the job's last lines, before the panel goes
        if self.live is not None:
            self._flush_job_lines()
            self.live.stop()  # erases the panel and shows the cursor again
            self.live = None
        if self._master_fd is not None:
            try:
                os.close(self._master_fd)
            except OSError:
                pass
            self._master_fd = None

    def tick(self) -> None:
        """Prints the job's new lines and redraws the panel when it is due."""
        if self.live is None:
            return
        self._flush_job_lines()
        now = time.monotonic()
        if now - self._last_draw >= REFRESH_S * 0.9:
            self._last_draw = now
            self.live.update(self.render(), refresh=True)

    def render(self) -> Group:
        self.frames += 1
        now = time.monotonic()
        try:
            fig = self.watcher.monitor.live()
        except Exception:  # the monitor stopped under us: keep the last frame's shape
            fig = {"loaders": [], "processes": [], "machine": {}}
        if now - self._verdict_at >= VERDICT_EVERY_S:
            self._verdict_at = now
            try:
                self._verdict = self.watcher.streaming_verdict()
            except Exception:
                pass
        return Group(self._head(now), self._loaders(fig), self._workers(fig), self._machine(fig))

    def _head(self, now: float) -> Group:
        t = Text("dldoctor live ", style="bold", no_wrap=True, overflow="ellipsis")
        t.append(f"{now - self.started:6.1f} s  ", style="dim")
        verdict, top = self._verdict
        hangs = getattr(self.watcher.monitor, "hangs", 0)
        if hangs:
            t.append("HANG: no batch for the hang timeout", style="bold red")
        elif top is not None:
            t.append(f"verdict so far: {verdict}", style="bold red")
            t.append(f" — {top.get('title', '')}")
        elif verdict == "healthy":
            t.append("verdict so far: healthy", style="bold green")
        else:
            t.append("verdict so far: (waiting for batches)", style="dim")
        cmd = Text(" ".join(self.command), style="dim", no_wrap=True, overflow="ellipsis")
        return Group(t, cmd)

    def _loaders(self, fig: dict) -> Group:
        ranks = getattr(self.watcher, "ranks", None) or {}  # loader id -> its rank's fields
        cols = [
            (" loader", 19 if ranks else 7, "<"),
            ("workers", 8, ">"),
            ("batches", 9, ">"),
            ("batches/s", 10, ">"),
            ("  data stall (main waits)", 0, "<"),
        ]
        lines = [_header(cols)]
        for ld in fig.get("loaders") or []:
            stall = ld.get("data_stall_pct")
            bar = _bar(
                None if stall is None else stall / 100, style="red" if (stall or 0) > 5 else "green"
            )
            bar.append(f" {_pct(stall)}")
            bps = ld.get("batches_per_s")
            lines.append(
                _row(
                    cols,
                    [
                        f" {_loader_name(ld.get('loader'), ranks)}",
                        str(ld.get("num_workers")),
                        str(ld.get("batches")),
                        "-" if bps is None else f"{bps:.1f}",
                        Text("  ") + bar,
                    ],
                )
            )
        if not fig.get("loaders"):
            lines.append(Text(" no DataLoader seen yet", style="dim"))
        return Group(*lines)

    def _workers(self, fig: dict) -> Group:
        cols = [
            (" process", 30 if getattr(self.watcher, "ranks", None) else 20, "<"),
            ("pid", 8, ">"),
            ("  state", 13, "<"),
            ("CPU (of a core)", 18, "<"),
            ("run-queue", 10, ">"),
            ("getitem ms/sample", 18, ">"),
            ("batches", 9, ">"),
        ]
        lines = [_header(cols)]
        procs = sorted(
            fig.get("processes") or [],
            key=lambda p: (p.get("role") == "main", p.get("loader") or 0, p.get("worker") or 0),
        )
        for p in procs[:32]:  # a screenful; the HTML report has them all
            ranks = getattr(self.watcher, "ranks", None) or {}
            name = (
                f" {_loader_name(p['loader'], ranks, True)} worker {p['worker']}"
                if p.get("role") == "worker"
                else " main"
            )
            st = p.get("state") or "?"
            cpu = p.get("cpu_pct")
            bar = _bar(None if cpu is None else cpu / 100, width=12)
            bar.append(f" {_pct(cpu):>4s}")
            g = p.get("getitem_ms")
            lines.append(
                _row(
                    cols,
                    [
                        name,
                        str(p.get("pid") or ""),
                        Text(f"  {st} {STATE_NAME.get(st, '')}", style=STATE_STYLE.get(st, "")),
                        bar,
                        _pct(p.get("runq_delay_pct")),
                        "-" if g is None else f"{g:.2f}",
                        str(p.get("batches")) if p.get("batches") else "-",
                    ],
                )
            )
        if len(procs) > 32:
            lines.append(Text(f" ... {len(procs) - 32} more", style="dim"))
        return Group(*lines)

    def _machine(self, fig: dict) -> Group:
        m = fig.get("machine") or {}
        used, total = m.get("shm_used_bytes"), m.get("shm_total_bytes")
        shm = _bar(used / total if used is not None and total else None, style="magenta")
        shm.append(f" {_size(used)} of {_size(total)}")
        avail = m.get("mem_available_bytes")
        mem_total = ((self.watcher.facts or {}).get("memory") or {}).get("total_bytes")
        mem = _bar(
            1 - avail / mem_total if avail is not None and mem_total else None, style="yellow"
        )
        mem.append(f" {_size(avail)} available" + (f" of {_size(mem_total)}" if mem_total else ""))
        busy = m.get("cpu_busy_pct")
        cpu = _bar(None if busy is None else busy / 100, style="cyan")
        cpu.append(f" {_pct(busy)}")
        rows = [("/dev/shm", shm), ("memory used", mem), ("machine CPU", cpu)]
        rows += _gpu_rows(fig)
        return Group(
            *(Text(f" {label:12s} ", style="bold", no_wrap=True) + bar for label, bar in rows)
        )


def _gpu_rows(fig: dict) -> list[tuple[str, Text]]:
    """A line per GPU: NVML's utilization (a kernel running, not how busy it is) and memory."""
    gpus = fig.get("gpus") or []
    if not gpus:
        why = fig.get("gpu_not_measured")
        return [("GPU", Text(f"not measured: {why}", style="dim"))] if why else []
    rows = []
    for g in gpus[:8]:  # a screenful; the HTML report has them all
        util = g.get("utilization_pct")
        bar = _bar(None if util is None else util / 100, style="green")
        bar.append(f" {_pct(util)} kernel time")
        used, total, job = (
            g.get("memory_used_bytes"),
            g.get("memory_total_bytes"),
            g.get("job_memory_bytes"),
        )
        bar.append(f"  mem {_size(used)} of {_size(total)}")
        if g.get("job"):
            bar.append(f" (job {_size(job)})")
        rows.append((f"GPU {g.get('index')}", bar))
    if len(gpus) > 8:
        rows.append(("", Text(f"... {len(gpus) - 8} more GPUs", style="dim")))
    return rows


# Plain text columns, not rich Tables: a table's layout costs ~5 ms a frame, lines ~0.5 ms,
# and the panel redraws twice a second for the whole run.
def _loader_name(loader, ranks: dict, long: bool = False) -> str:
    """The loader's id (a job without ranks, as before), or "rank R · loader M"."""
    rank = ranks.get(loader)
    if rank is None:
        return f"loader {loader}" if long else str(loader)
    return loader_label({"id": loader, **rank})


def _header(cols) -> Text:
    return _row(cols, [c[0] for c in cols], style="bold")


def _row(cols, cells, style: str = "") -> Text:
    out = Text(no_wrap=True, overflow="ellipsis", style=style)
    for (_, width, align), cell in zip(cols, cells):
        text = cell if isinstance(cell, Text) else Text(str(cell))
        if width:
            pad = max(width - text.cell_len, 0)
            if align == ">":
                text = Text(" " * pad) + text
            else:
                text = text + Text(" " * pad)
        out.append_text(text)
        out.append(" ")
    return out
