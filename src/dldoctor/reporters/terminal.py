"""The terminal report (rich): the verdict, each finding as Diagnosis / Fix / Why with its
numbers, and a per-loader table."""

from __future__ import annotations

import io
import sys

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..report import loader_label
from . import evidence, loader_table

STYLE = {"critical": "bold red", "warning": "yellow", "info": "cyan"}

# Per-loader table: (header, key in the loader summary, format)
_LOADER_COLUMNS = [
    ("loader", "id", "{}"),
    ("num_workers", "num_workers", "{}"),
    ("batch_size", "batch_size", "{}"),
    ("batches seen", "batches", "{}"),
    ("batches/s", "batches_per_s", "{:.1f}"),
    ("data stall (main waits)", "data_stall_pct", "{:.0f}%"),
    ("getitem per sample p50/p99 ms", ("getitem_p50_ms", "getitem_p99_ms"), "{:.2f}/{:.2f}"),
    ("collate per batch p50 ms", "collate_p50_ms", "{:.2f}"),
    ("worker CPU (of a core)", "worker_cpu_pct", "{:.0f}%"),
    ("worker run-queue delay", "runq_delay_pct", "{:.0f}%"),
    ("storage reads MB/s", "read_mb_s", "{:.1f}"),
]


def _fmt(value, spec: str) -> str:
    if value is None:
        return "-"
    try:
        if isinstance(value, tuple):
            if any(v is None for v in value):
                return "-"
            return spec.format(*value)
        return spec.format(value)
    except (ValueError, TypeError):
        return str(value)


def format_evidence_value(value) -> str:
    if isinstance(value, float):
        if value == int(value) and abs(value) < 1e15:
            return str(int(value))
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def _finding_panel(f: dict) -> Panel:
    sev = f.get("severity", "info")
    grid = Table.grid(padding=(0, 1))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("Diagnosis:", evidence.short_paths(f.get("title", "")))
    ev = f.get("evidence") or {}
    if ev:
        rows = Table.grid(padding=(0, 1))
        rows.add_column(style="dim", no_wrap=True)
        rows.add_column(overflow="fold")
        for group, entries in evidence.grouped(ev):
            for i, line in enumerate(evidence.lines(entries)):
                rows.add_row(group if i == 0 else "", line)
        for line in evidence.differing_figures(ev):
            rows.add_row("note", Text(line, style="italic"))
        grid.add_row("Evidence:", rows)
    if f.get("fix"):
        grid.add_row(Text("Fix:", style="bold green"), evidence.short_paths(f["fix"]))
    if f.get("why"):
        grid.add_row("Why:", evidence.short_paths(f["why"]))
    title = f"[{STYLE.get(sev, '')}]{f['id']}[/] ({sev})"
    return Panel(grid, title=title, title_align="left", border_style=STYLE.get(sev, ""))


def _loader_table(loaders: list[dict]) -> Table:
    # One column per loader shown (loader_table.pick: a few), one row per figure.
    table = Table(title="DataLoaders", title_justify="left", show_edge=False)
    table.add_column("", style="bold")
    for ld in loaders:
        table.add_column(loader_label(ld), justify="right")
    for header, key, spec in _LOADER_COLUMNS[1:]:
        row = [header]
        for ld in loaders:
            value = tuple(ld.get(k) for k in key) if isinstance(key, tuple) else ld.get(key)
            row.append(_fmt(value, spec))
        table.add_row(*row)
    return table


def renderable(report, width: int = 110) -> Group:
    parts = []
    verdict = report.verdict
    if verdict == "healthy":
        head = Text("verdict: healthy", style="bold green")
        head.append(" — the DataLoader keeps up with the consumer", style="green")
    else:
        head = Text(f"verdict: {verdict}", style="bold red" if verdict != "unknown" else "bold")
    parts.append(Text("dldoctor ", style="bold") + head)
    for note in report.notes:
        parts.append(Text("note: " + note, style="dim"))
    for f in report.findings:
        parts.append(_finding_panel(f))
    if report.loaders:
        limit = loader_table.fits(width)
        shown, rest = loader_table.pick(report.loaders, report.findings, limit)
        parts.append(_loader_table(shown))
        if rest:
            parts.append(Text(rest, style="dim"))
    if report.hang and report.hang.get("summary"):
        parts.append(Text("hang: " + report.hang["summary"], style="bold red"))
    return Group(*parts)


def print_report(report, file=None) -> None:
    console = Console(file=file or sys.stderr, highlight=False)
    console.print(renderable(report, console.width))


def render_text(report, width: int = 110) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, color_system=None, highlight=False)
    console.print(renderable(report, width))
    return buf.getvalue()
