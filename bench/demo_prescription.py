"""The demo's prescription, measured: `dldoctor run -- python -m dldoctor.demo` (1 worker
decoding full-size JPEGs) prescribes a num_workers; the same demo is then run with it
(`dldoctor run --set num_workers=N`), rounds alternated so the machine's load hits both
sides alike. Prints each round's images/s (the demo's own count), the prescription, the
ratio, and the load average.

    python bench/demo_prescription.py [--rounds 3] [--seconds 12]
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


def demo(seconds: float, sets: list[str], report: str) -> tuple[float, dict]:
    cmd = [sys.executable, "-m", "dldoctor", "run", "-q", "--json", report]
    for s in sets:
        cmd += ["--set", s]
    cmd += ["--", sys.executable, "-m", "dldoctor.demo", "--seconds", str(seconds)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds * 10 + 120)
    m = re.search(r"demo: (\d+) steps, (\d+) images/s", p.stdout + p.stderr)
    if not m:
        raise SystemExit(f"no demo rate in the output:\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    with open(report) as f:
        return float(m.group(2)), json.load(f)


def prescribed(rep: dict) -> int | None:
    for f in rep.get("findings") or []:
        n = (f.get("evidence") or {}).get("recommended_num_workers")
        if isinstance(n, (int, float)):
            return int(n)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=12.0)
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dldoctor-bench-")
    own, fixed, prescriptions, loads = [], [], [], []
    for i in range(args.rounds):
        loads.append(os.getloadavg()[0])
        rate, rep = demo(args.seconds, [], os.path.join(tmp, f"own-{i}.json"))
        n = prescribed(rep)
        prescriptions.append(n)
        f = next((f for f in rep["findings"] if f["id"] == rep["verdict"]), {})
        print(
            f"round {i + 1}: own settings (1 worker) {rate:.0f} images/s, verdict "
            f"{rep['verdict']}, prescribed num_workers={n}; fix: {f.get('fix', '')[:300]}",
            flush=True,
        )
        own.append(rate)
        n_set = n if n is not None else 2
        rate2, rep2 = demo(
            args.seconds, [f"num_workers={n_set}"], os.path.join(tmp, f"set-{i}.json")
        )
        print(
            f"round {i + 1}: --set num_workers={n_set} {rate2:.0f} images/s, verdict "
            f"{rep2['verdict']}",
            flush=True,
        )
        fixed.append(rate2)
        loads.append(os.getloadavg()[0])
    ratios = [b / a for a, b in zip(own, fixed)]
    print(
        f"own {statistics.median(own):.0f} images/s (rounds {', '.join(f'{x:.0f}' for x in own)}); "
        f"prescribed {statistics.median(fixed):.0f} (rounds {', '.join(f'{x:.0f}' for x in fixed)}); "
        f"median ratio {statistics.median(ratios):.2f} (rounds {', '.join(f'{r:.2f}' for r in ratios)}); "
        f"prescriptions {prescriptions}; load average {min(loads):.1f}-{max(loads):.1f} "
        f"on {len(os.sched_getaffinity(0))} CPUs"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
