"""What the prescription benches share: a scenario job run under `dldoctor run` per side, its
batches/s read from the job's own count, and the sides in an order that rotates between
rounds so the machine's load hits every side alike, with each side's median against the
first side's.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
from typing import Callable

# A side: (dldoctor run's arguments, the job's arguments).
Side = tuple[list[str], list[str]]


def run_side(script: str, seconds: float, side: Side, report: str) -> tuple[float, dict]:
    """One run of `script` with `side`'s arguments: the job's batches/s and the JSON report."""
    doctor, job = side
    cmd = [sys.executable, "-m", "dldoctor", "run", "-q", "--json", report, *doctor, "--"]
    cmd += [sys.executable, script, "--seconds", str(seconds), *job]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 120)
    m = re.search(r"batches: (\d+)", p.stdout)
    if not m:
        raise SystemExit(f"no batch count in the output:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    with open(report) as f:
        rep = json.load(f)
    return float(m.group(1)) / seconds, rep


def rotate(
    script: str,
    sides: dict[str, Side],
    rounds: int,
    seconds: float,
    describe: Callable[[dict], str],
    baseline: str,
) -> None:
    """Runs every side `rounds` times, rotating the order; prints each run (batches/s, verdict,
    `describe(report)`), then each side's median and its ratio to the first side's, which is
    `baseline` ("the job's own settings")."""
    tmp = tempfile.mkdtemp(prefix="dldoctor-bench-")
    names = list(sides)
    rates: dict[str, list[float]] = {n: [] for n in names}
    print(f"== load before: {os.getloadavg()[0]:.2f}")
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            rate, rep = run_side(script, seconds, sides[name], os.path.join(tmp, f"{r}.json"))
            rates[name].append(rate)
            print(
                f"round {r + 1}: {name}: {rate:.1f} batches/s, verdict {rep['verdict']}, "
                f"{describe(rep)}",
                flush=True,
            )
    base = statistics.median(rates[names[0]])
    for name in names:
        med = statistics.median(rates[name])
        print(f"== {name}: median {med:.1f} batches/s, {med / base:.2f}x {baseline}")
    print(f"== load after: {os.getloadavg()[0]:.2f}")
