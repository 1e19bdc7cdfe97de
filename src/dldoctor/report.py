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


def _finite(o: Any) -> Any:
    """JSON has no NaN or infinity: an unmeasurable figure is null ("unknown")."""
    if isinstance(o, float):
        return o if math.isfinite(o) else None
    if isinstance(o, dict):
        return {str(k): _finite(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_finite(v) for v in o]
    return o
