"""slow_handover's prescription, measured: the scenario job whose batches hold 32 tensors
(tests/scenarios/slow_handover.py, 2 workers, a 40 ms step) runs under `dldoctor run` with its
own settings, with the prescribed `torch.multiprocessing.set_sharing_strategy('file_system')`
(`--strategy file_system`), with the fields stacked into one tensor per sample (the
prescription's second half, `--healthy`), and with `dldoctor run --set num_workers=0` (the
prescription when a worker makes a batch faster than it is handed over), in an order that
rotates between rounds so the
machine's load hits every side alike. Prints each run's batches/s (the job's own count over
its loop), the verdict and the hand-over the report measured, then each side's median and its
ratio to the job's own settings, and the load average.

`--busy-step`: the scenario's other form, 8 tensors a batch behind a step of torch ops that
keeps every core busy (`--busy-step --fields 8` on every side).

    python bench/handover_prescription.py [--rounds 3] [--seconds 10] [--busy-step]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "tests", "scenarios", "slow_handover.py")
# Each side: (dldoctor run's arguments, the job's arguments).
SIDES = {
    "own settings (file_descriptor)": ([], []),
    "set_sharing_strategy('file_system')": ([], ["--strategy", "file_system"]),
    "one tensor a batch (fields stacked)": ([], ["--healthy"]),
    "--set num_workers=0": (["--set", "num_workers=0"], []),
}


def run(
    seconds: float, side: tuple[list[str], list[str]], report: str, extra: list[str]
) -> tuple[float, dict]:
    doctor, job = side
    job = [*job, *extra]
    cmd = [sys.executable, "-m", "dldoctor", "run", "-q", "--json", report, *doctor, "--"]
    cmd += [sys.executable, SCRIPT, "--seconds", str(seconds), *job]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 120)
    m = re.search(r"batches: (\d+)", p.stdout)
    if not m:
        raise SystemExit(f"no batch count in the output:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    with open(report) as f:
        rep = json.load(f)
    return float(m.group(1)) / seconds, rep


def handover(rep: dict) -> str:
    for f in rep.get("findings") or []:
        if f["id"] == "slow_handover":
            e = f["evidence"]
            return f"hand-over {e['handover_ms']:.1f} ms, {100 * e['handover_fraction']:.0f}% of the loop"
    stall = (rep.get("loaders") or [{}])[0].get("data_stall_pct")
    return f"data stall {stall:.1f}%" if stall is not None else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--busy-step", action="store_true", help="8 tensors, a step of torch ops")
    args = ap.parse_args()
    extra = ["--busy-step", "--fields", "8"] if args.busy_step else []
    tmp = tempfile.mkdtemp(prefix="dldoctor-bench-")
    names = list(SIDES)
    rates: dict[str, list[float]] = {n: [] for n in names}
    print(f"== load before: {os.getloadavg()[0]:.2f}")
    for r in range(args.rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for name in order:
            rate, rep = run(args.seconds, SIDES[name], os.path.join(tmp, f"{r}.json"), extra)
            rates[name].append(rate)
            print(
                f"round {r + 1}: {name}: {rate:.1f} batches/s, verdict {rep['verdict']}, "
                f"{handover(rep)}",
                flush=True,
            )
    base = statistics.median(rates[names[0]])
    for name in names:
        med = statistics.median(rates[name])
        print(f"== {name}: median {med:.1f} batches/s, {med / base:.2f}x the job's own settings")
    print(f"== load after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
