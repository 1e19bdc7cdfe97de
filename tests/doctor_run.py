"""Runs jobs under `dldoctor run` for the tests, the way a user would, and reads the report;
runs the entries of tests/scenarios/catalog.py with the real faults they need."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

import _faults

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIOS = os.path.join(HERE, "scenarios")
sys.path.insert(0, SCENARIOS)
import catalog  # noqa: E402, F401  (the list of scenarios, for the tests: doctor_run.catalog)

REFUSED_RC = 77  # a scenario that finds its fault refused exits 77 with the reason


@dataclass
class DoctorRun:
    returncode: int
    stdout: str
    stderr: str
    report: dict | None
    seconds: float = 0.0  # wall time of the whole run

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

    def notice_s(self, fid: str) -> float | None:
        """Seconds from the job's start to the early notice naming `fid` while it ran (the
        line `dldoctor: [7.3 s] slow_getitem: ...`), None when there was none."""
        m = re.search(
            rf"^dldoctor: \[([0-9.]+) s\] (?:warning, )?{re.escape(fid)}:", self.stderr, re.M
        )
        return float(m.group(1)) if m else None


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
    start = time.monotonic()
    proc = subprocess.run(
        full, capture_output=True, text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL
    )
    seconds = time.monotonic() - start
    report = None
    if os.path.exists(out):
        with open(out) as f:
            report = json.load(f)
    return DoctorRun(proc.returncode, proc.stdout, proc.stderr, report, seconds)


def scenario(name: str, *args: str, ranks: int = 0) -> list[str]:
    """The scenario's command; with `ranks`, started by torchrun with that many ranks on this
    node (`python -m torch.distributed.run` is what the `torchrun` command runs)."""
    script = os.path.join(SCENARIOS, name + ".py")
    if ranks:
        launcher = ["-m", "torch.distributed.run", "--nproc-per-node", str(ranks)]
        return [sys.executable, *launcher, "--standalone", script, *args]
    return [sys.executable, script, *args]


# --- catalog entries ---------------------------------------------------------------------------


@contextlib.contextmanager
def entry_fault(entry: dict) -> Iterator[tuple[list[str], list[str]]]:
    """(prefix, extra job arguments) for the entry's needs; pytest.skip where refused."""
    needs = entry.get("needs") or {}
    if needs.get("root"):
        _faults.skip_unless_root()
    cpus = needs.get("cpus")
    if cpus and len(os.sched_getaffinity(0)) < cpus:
        pytest.skip(
            f"the scenario needs {cpus} CPUs, this process may use {len(os.sched_getaffinity(0))}"
        )
    if needs.get("no_accelerator"):
        torch = pytest.importorskip("torch")
        if torch.cuda.is_available():
            pytest.skip("this machine has CUDA: the scenario is about a machine without one")
    if "shm_mib" in needs:
        yield _faults.namespace_cmd([], shm_mib=needs["shm_mib"]), []
    elif "memory_cgroup_mib" in needs:
        with _faults.memory_limit_cgroup(needs["memory_cgroup_mib"] << 20) as cg:
            yield [], ["--cgroup", cg.path]
    elif "cpu_quota" in needs:
        with _faults.cpu_quota_cgroup(needs["cpu_quota"]) as cg:
            # The doctor and the job both inside, as in a container: the shell moves itself in
            # and becomes the command.
            enter = f'echo $$ > {shlex.quote(os.path.join(cg.path, "cgroup.procs"))} && exec "$@"'
            yield ["sh", "-c", enter, "sh"], []
    else:
        yield [], []


def run_entry_once(entry: dict, tmp_path) -> DoctorRun:
    """The catalog entry run under `dldoctor run` with its fault; pytest.skip, with the
    reason, where the machine refuses the fault (or the scenario exits REFUSED_RC)."""
    with entry_fault(entry) as (prefix, extra):
        r = run_doctor(
            scenario(entry["script"], *entry.get("args", []), *extra, ranks=entry.get("ranks", 0)),
            tmp_path,
            entry.get("doctor_args", ()),
            timeout=entry.get("timeout", 120),
            prefix=prefix,
        )
    if r.returncode == REFUSED_RC:
        lines = r.stdout.strip().splitlines()
        pytest.skip(lines[-1] if lines else "the fault was refused")
    return r


_RUNS: dict[str, DoctorRun | str] = {}  # entry name -> its run, or why it was skipped


def run_entry(entry: dict, tmp_path) -> DoctorRun:
    """run_entry_once, once per entry and session: later calls return the same run, so a test
    of tests/test_<id>.py can check more of the run tests/test_scenarios.py made."""
    name = entry["name"]
    if name not in _RUNS:
        try:
            _RUNS[name] = run_entry_once(entry, tmp_path)
        except pytest.skip.Exception as e:
            _RUNS[name] = str(e)
    r = _RUNS[name]
    if isinstance(r, str):
        pytest.skip(r)
    return r
