"""The report: findings, the verdict, machine facts and per-loader figures (DESIGN.md section 5).

A Report is plain data. It is built by the watcher from the analyzer's output, saved as
JSON (schema 1) and re-read by `dldoctor report`; reporters render it and nothing else.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from . import __version__
from .errors import DldoctorError

SCHEMA = 1

# Facts copied to the top of `system` because every reader wants them first.
_SYSTEM_HEADLINE = {
    "usable_cpus": ("cpu", "usable"),
    "affinity_cpus": ("cpu", "affinity"),
    "physical_cores": ("cpu", "physical_cores"),
    "mem_total_bytes": ("memory", "total_bytes"),
    "mem_available_bytes": ("memory", "available_bytes"),
    "cgroup_memory_limit_bytes": ("memory", "cgroup_limit_bytes"),
    "shm_total_bytes": ("shm", "total_bytes"),
    "shm_free_bytes": ("shm", "free_bytes"),
    "nofile_soft": ("limits", "nofile_soft"),
}


def system_section(facts: dict | None) -> dict:
    """The report's `system` object: headline figures, then every fact as collected."""
    facts = facts or {}
    out: dict[str, Any] = {}
    for key, (group, name) in _SYSTEM_HEADLINE.items():
        out[key] = (facts.get(group) or {}).get(name)
    out["facts"] = facts
    return out


def loader_label(ld: dict) -> str:
    """How every reporter names a loader: "rank 1 · loader 2" in a multi-rank job (its number
    among its rank's loaders), "loader 3" without ranks; a merged report's loaders lead with
    their node ("node1 · rank 9 · loader 1")."""
    lid = ld.get("id", ld.get("loader", "?"))
    rank = ld.get("rank", ld.get("local_rank"))
    node = f"{ld['node']} \u00b7 " if ld.get("node") else ""
    if isinstance(rank, int):
        return f"{node}rank {rank} \u00b7 loader {ld.get('rank_loader') or lid}"
    return f"{node}loader {lid}"


def loader_labels(loaders: list[dict]) -> dict:
    """Loader id -> loader_label, for reporters that meet a loader by its id (series, trace)."""
    return {ld.get("id", ld.get("loader")): loader_label(ld) for ld in loaders or []}


@dataclass
class Report:
    verdict: str = "unknown"
    findings: list[dict] = field(default_factory=list)
    system: dict = field(default_factory=dict)
    loaders: list[dict] = field(default_factory=list)
    command: list[str] | None = None
    exit_code: int | None = None
    notes: list[str] = field(default_factory=list)
    # What the HTML report and traces need later: time series and per-worker figures.
    series: dict = field(default_factory=dict)
    hang: dict | None = None
    # `dldoctor attach`: what was found from the pid and how it was sampled.
    attach: dict | None = None
    # The early notices of `dldoctor run` ({id, title, seen_s, held_until_s, confirmed}).
    notices: list[dict] = field(default_factory=list)
    # `dldoctor report A.json B.json ...`: one entry per node's report merged into this one.
    nodes: list[dict] = field(default_factory=list)
    # dldoctor run --set: the settings overridden, per loader (creation order) and process.
    settings_overridden: list[dict] = field(default_factory=list)
    tool_version: str = __version__

    # -- queries ---------------------------------------------------------------------
    def ids(self) -> list[str]:
        return [f["id"] for f in self.findings]

    def finding(self, finding_id: str) -> dict | None:
        return next((f for f in self.findings if f["id"] == finding_id), None)

    # -- serialisation ---------------------------------------------------------------
    def to_dict(self) -> dict:
        d = {
            "schema": SCHEMA,
            "tool_version": self.tool_version,
            "verdict": self.verdict,
            "findings": self.findings,
            "system": self.system,
            "loaders": self.loaders,
            "command": self.command,
            "exit_code": self.exit_code,
            "notes": self.notes,
        }
        if self.hang is not None:
            d["hang"] = self.hang
        if self.attach is not None:
            d["attach"] = self.attach
        if self.notices:
            d["notices"] = self.notices
        if self.nodes:
            d["nodes"] = self.nodes
        if self.series:
            d["series"] = self.series
        if self.settings_overridden:
            d["settings_overridden"] = self.settings_overridden
        return d

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(_finite(self.to_dict()), indent=indent)

    def write_json(self, path: str) -> None:
        text = self.to_json()
        if path == "-":
            print(text)
            return
        try:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text + "\n")
        except OSError as e:
            raise DldoctorError(f"cannot write the JSON report to {path}: {e.strerror}") from None

    @classmethod
    def from_dict(cls, d: dict) -> Report:
        if not isinstance(d, dict) or d.get("schema") != SCHEMA:
            raise DldoctorError(
                f"not a dldoctor report of schema {SCHEMA} (schema: {d.get('schema') if isinstance(d, dict) else None})"
            )
        return cls(
            verdict=d.get("verdict", "unknown"),
            findings=list(d.get("findings") or []),
            system=dict(d.get("system") or {}),
            loaders=list(d.get("loaders") or []),
            command=d.get("command"),
            exit_code=d.get("exit_code"),
            notes=list(d.get("notes") or []),
            series=dict(d.get("series") or {}),
            hang=d.get("hang"),
            attach=d.get("attach"),
            notices=list(d.get("notices") or []),
            nodes=list(d.get("nodes") or []),
            settings_overridden=list(d.get("settings_overridden") or []),
            tool_version=d.get("tool_version", "?"),
        )

    @classmethod
    def read_json(cls, path: str) -> Report:
        try:
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
        except OSError as e:
            raise DldoctorError(f"cannot read {path}: {e.strerror}") from None
        except json.JSONDecodeError as e:
            raise DldoctorError(f"{path} is not JSON: {e.msg} at line {e.lineno}") from None
        return cls.from_dict(data)

    def __str__(self) -> str:
        from .reporters.terminal import render_text

        return render_text(self)


def merge_reports(reports: list[Report], names: list[str]) -> Report:
    """Several nodes' reports (each `dldoctor run --json` of one node's torchrun) as one job.

    The job is decided in C++ (analyze/merge, `_ext.merge_nodes`): the node holding the
    slowest rank first (in synchronous data-parallel training every rank moves at its pace),
    the findings of every node in the job's order (severity, then the slower node's, each
    node's own order kept), the job's verdict, and each node's budgets over all its ranks.
    Here the reports' dicts are only stored in that order, each marked with its node, and
    the notes say what was decided."""
    from . import _ext

    decided = _ext.merge_nodes(
        [
            {
                "name": name,
                "verdict": r.verdict,
                "findings": r.findings,
                "loaders": r.loaders,
                "system": r.system,
            }
            for name, r in zip(names, reports)
        ]
    )
    nodes = []
    for n in decided["nodes"]:
        i, r = n["index"], reports[n["index"]]
        slowest = r.loaders[n["slowest_loader"]] if n["slowest_loader"] is not None else None
        nodes.append(
            {
                "node": names[i],
                "verdict": r.verdict,
                "ranks": n["ranks"],
                "slowest_loader": {**slowest, "node": names[i]} if slowest else None,
                "exit_code": r.exit_code,
                **{k: r.system.get(k) for k in _SYSTEM_HEADLINE},
                "budgets": {
                    k: n[k]
                    for k in (
                        "main_processes",
                        "workers",
                        "usable_cpus",
                        "shm_in_flight_bytes",
                        "shm_free_bytes",
                    )
                },
            }
        )
    out = Report(verdict=decided["verdict"], nodes=nodes)
    summary = f"{len(reports)} reports merged into one job, the slowest node first"
    if decided["slowest"] is not None:
        node, loader = decided["slowest"]
        gate = {**reports[node].loaders[loader], "node": names[node]}
        summary += (
            f"; the slowest rank is {loader_label(gate)}"
            f" ({gate.get('batches_per_s') or 0:.1f} batches/s)"
        )
    out.notes.append(summary)
    for n in out.nodes:
        ranks = ", ".join(str(x) for x in n["ranks"]) or "none"
        b = n["budgets"]
        line = (
            f"{n['node']}: verdict {n['verdict']}, ranks {ranks}, usable CPUs "
            f"{n.get('usable_cpus')}, /dev/shm {n.get('shm_total_bytes')} bytes"
        )
        line += f"; {b['main_processes']} main processes and {b['workers']} workers"
        if b["usable_cpus"] is not None:
            line += f" on {b['usable_cpus']:g} usable CPUs"
        if b["shm_in_flight_bytes"] is not None:
            line += f", {b['shm_in_flight_bytes']:.0f} bytes in flight in /dev/shm"
            if b["shm_free_bytes"] is not None:
                line += f" of {b['shm_free_bytes']} free"
        out.notes.append(line)
    out.findings = [{**reports[i].findings[j], "node": names[i]} for i, j in decided["findings"]]
    for n in decided["nodes"]:
        i = n["index"]
        out.loaders += [{**ld, "node": names[i]} for ld in reports[i].loaders]
        out.notes += [f"{names[i]}: {x}" for x in reports[i].notes]
    codes = [r.exit_code for r in reports]
    out.exit_code = next((c for c in codes if c), 0 if all(c == 0 for c in codes) else None)
    return out


def _finite(o: Any) -> Any:
    """JSON has no NaN or infinity: an unmeasurable figure is null ("unknown")."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o


def series_section(series: dict) -> dict:
    """The monitor's series for Report.series, rounded: four significant digits are more
    than a chart shows, and they keep the JSON of a long run small."""

    def r(v):
        if isinstance(v, float):
            return float(f"{v:.4g}")
        if isinstance(v, list):
            return [r(x) for x in v]
        if isinstance(v, dict):
            return {k: r(x) for k, x in v.items()}
        return v

    if not series.get("t_s"):
        return {}  # nothing was sampled (the job ended at once): no empty arrays in the JSON
    return r(series)


def hang_section(hang: dict, timeout_s: float) -> dict:
    """Report.hang from the core's hang result: the first critical finding's title, the
    timeout, the snapshot."""
    snap = hang.get("snapshot") or {}
    crit = [f for f in hang.get("findings") or [] if f.get("severity") == "critical"]
    summary = crit[0]["title"] if crit else "no batch for the hang timeout"
    return {"summary": summary, "timeout_s": timeout_s, "snapshot": snap}
