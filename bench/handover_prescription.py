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
import os
import sys

from _prescription import rotate

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "tests", "scenarios", "slow_handover.py")
# Each side: (dldoctor run's arguments, the job's arguments).
SIDES = {
    "own settings (file_descriptor)": ([], []),
    "set_sharing_strategy('file_system')": ([], ["--strategy", "file_system"]),
    "one tensor a batch (fields stacked)": ([], ["--healthy"]),
    "--set num_workers=0": (["--set", "num_workers=0"], []),
}


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
    sides = {name: (doctor, [*job, *extra]) for name, (doctor, job) in SIDES.items()}
    rotate(SCRIPT, sides, args.rounds, args.seconds, handover, "the job's own settings")
    return 0


if __name__ == "__main__":
    sys.exit(main())
