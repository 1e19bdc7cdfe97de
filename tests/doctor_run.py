"""Runs jobs under `dldoctor run` for the tests, the way a user would, and reads the report."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "scenarios")


@dataclass
class DoctorRun:
    returncode: int
    stdout: str
    stderr: str
    report: dict | None

    def ids(self) -> list[str]:
        return [f["id"] for f in (self.report or {}).get("findings", [])]

    def finding(self, fid: str) -> dict:
        for f in (self.report or {}).get("findings", []):
            if f["id"] == fid:
                return f
        raise AssertionError(f"no {fid} finding; findings: {self.ids()}\n{self.stderr}")

    def loud(self) -> list[str]:
        """Findings a user would be told to act on (warning or critical)."""
        return [
            f["id"]
            for f in (self.report or {}).get("findings", [])
            if f["severity"] in ("warning", "critical")
        ]


def run_doctor(
    cmd: list[str], tmp_path, doctor_args=(), timeout: float = 120, env=None, prefix=()
) -> DoctorRun:
    """`[prefix...] python -m dldoctor run --json F [doctor_args] -- cmd...`"""
    out = os.path.join(str(tmp_path), f"report-{os.getpid()}-{len(os.listdir(str(tmp_path)))}.json")
    full = [
        *prefix,
        sys.executable,
        "-m",
        "dldoctor",
        "run",
        "--json",
        out,
        *doctor_args,
        "--",
        *cmd,
    ]
    proc = subprocess.run(
        full, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
    )
    report = None
    if os.path.exists(out):
        with open(out) as f:
            report = json.load(f)
    return DoctorRun(proc.returncode, proc.stdout, proc.stderr, report)


def scenario(name: str, *args: str) -> list[str]:
    return [sys.executable, os.path.join(SCENARIOS, name + ".py"), *args]
