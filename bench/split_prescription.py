"""uneven_worker_split's prescription, measured: the scenario job (tests/scenarios/
uneven_worker_split.py: an IterableDataset dealt by shard to 3 workers, 10 ms a sample, 4 a
batch, a 20 ms step; shards of 200 samples, 2 s of one worker, so epochs end within a run)
runs under `dldoctor run` with its own data (1 shard), with the prescription (as many shards
as workers, `--shards 3`), with shards that do not divide evenly (`--shards 4`: one worker
gets two), and with `dldoctor run --set num_workers=6` on the one shard (what a doctor blind
to the split prescribes: more workers), in an order that rotates between rounds so the
machine's load hits every side alike. Prints each run's batches/s (the job's own count over
its loop), the verdict and the workers with data the report measured, then each side's median
and its ratio to the job's own.

    python bench/split_prescription.py [--source own|hf|webdataset] [--rounds 3] [--seconds 10]
"""

from __future__ import annotations

import argparse
import os
import sys

from _prescription import rotate

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "tests", "scenarios", "uneven_worker_split.py")
# Samples a shard: a worker reads one in 2 s, so epochs end within a run, and a worker with
# two of the 4 shards reads on alone for the second half of each epoch.
SHARD_SAMPLES = ["--shard-samples", "200"]
# Each side: (dldoctor run's arguments, the job's arguments).
SIDES = {
    "1 shard (the job's own)": ([], ["--shards", "1"]),
    "3 shards (prescribed)": ([], ["--shards", "3"]),
    "4 shards (uneven)": ([], ["--shards", "4"]),
    "1 shard, --set num_workers=6": (["--set", "num_workers=6"], ["--shards", "1"]),
}


def split(rep: dict) -> str:
    for f in rep.get("findings") or []:
        if f["id"] == "uneven_worker_split":
            e = f["evidence"]
            return (
                f"{e['active_workers']:.2f} of {e['num_workers']:.0f} workers with data, "
                f"{100 * e['idle_worker_share']:.0f}% of their time without"
            )
    stall = (rep.get("loaders") or [{}])[0].get("data_stall_pct")
    return f"data stall {stall:.1f}%" if stall is not None else ""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--source", choices=("own", "hf", "webdataset"), default="own")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=10.0)
    args = ap.parse_args()
    print(f"== data: {args.source}")
    job = ["--source", args.source, *SHARD_SAMPLES]
    sides = {name: (doctor, [*own, *job]) for name, (doctor, own) in SIDES.items()}
    rotate(SCRIPT, sides, args.rounds, args.seconds, split, "the job's own data")
    return 0


if __name__ == "__main__":
    sys.exit(main())
