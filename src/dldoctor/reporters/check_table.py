"""The terminal view of `dldoctor check` (rich): one row per check with its status and measured
number, then every fix in full below the table, where commands and YAML copy cleanly."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "unknown": "dim"}
LABEL = {"ok": "OK", "warn": "WARN", "fail": "FAIL", "unknown": "UNKNOWN"}


def format_value(value, unit: str, status: str = "") -> str:
    if value is None:
        return "unknown" if status == "unknown" else "-"
    if unit == "bytes" and isinstance(value, (int, float)):
        from ..preflight.checks import human_bytes

        return human_bytes(value)
    if isinstance(value, float):
        text = f"{value:.0f}" if unit == "MB/s" else f"{value:.2f}".rstrip("0").rstrip(".")
        return f"{text} {unit}".strip()
    if unit and isinstance(value, int):
        return f"{value} {unit[:-1] if value == 1 and unit.endswith('s') else unit}"
    return str(value)


def render(checks: list[dict], assumptions: dict, file=None) -> None:
    """Prints the table of checks and their fixes; `checks` are Check.to_dict() rows."""
    console = Console(file=file or sys.stdout, highlight=False, soft_wrap=False)
    table = Table(title="dldoctor check", title_justify="left", show_lines=False, expand=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("measured", justify="right", no_wrap=True)
    table.add_column("details", overflow="fold")
    for c in checks:
        status = c["status"]
        table.add_row(
            c["id"],
            Text(LABEL.get(status, status), style=STYLE.get(status, "")),
            format_value(c["value"], c.get("unit", ""), status),
            c["message"],
        )
    console.print(table)
    fixes = [c for c in checks if c.get("fix") and c["status"] != "ok"]
    for c in fixes:
        console.print(Text(f"\n{LABEL[c['status']]} {c['id']}: fix", style=STYLE[c["status"]]))
        console.print(Text(c["fix"]), soft_wrap=True)
    if not assumptions.get("batch_bytes_given"):
        console.print(
            Text(
                "\nSizes assume a batch of 64x3x224x224 float32; pass --batch-bytes (and "
                "--num-workers) for your job's figures.",
                style="dim",
            )
        )
    failed = sum(c["status"] == "fail" for c in checks)
    warned = sum(c["status"] == "warn" for c in checks)
    summary = f"\n{failed} FAIL, {warned} WARN, {len(checks) - failed - warned} OK/UNKNOWN"
    console.print(Text(summary, style="bold red" if failed else ("yellow" if warned else "green")))
