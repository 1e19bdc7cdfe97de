"""What the /proc sampler costs: thread CPU time per pass for trees of sleeping processes.

A tree here is a Python root that forks N children which sleep (the shape of a DataLoader:
forked workers of one interpreter). The sampler runs on its own thread at 10 Hz with
smaps_rollup every 10th pass for a few seconds; the cost is the thread CPU time of its passes.
Budget (DESIGN.md §6): at most 1% of one core at 10 Hz for a tree of 64 workers.

    python bench/sampler_bench.py [--sizes 1 16 64] [--seconds 5] [--heavy] [--threads]
"""

import argparse
import os
import subprocess
import sys
import time

from dldoctor import _ext

BUDGET_PCT = 1.0  # of one core at 10 Hz for 64 workers

# The root imports what makes a worker's address space realistic, then forks; each child
# sleeps with the parent's mappings, as a forked DataLoader worker does.
TREE = """
import os, sys, time
if {heavy}:
    import numpy  # noqa: F401  (more mappings: smaps_rollup walks each one)
for _ in range({n}):
    if os.fork() == 0:
        time.sleep(3600)
        os._exit(0)
print("ready", flush=True)
time.sleep(3600)
"""


def measure(n, seconds, hz, smaps_every, heavy, threads, total_budget=0.0):
    root = subprocess.Popen(
        [sys.executable, "-c", TREE.format(n=n, heavy=heavy)],
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert root.stdout.readline().strip() == b"ready"
        sampler = _ext.Sampler(root.pid, interval_s=1 / hz, smaps_every=smaps_every,
                               threads=threads, capacity=16, total_budget_pct=total_budget)
        sampler.sample_once()  # first reads (all slow sources, descriptors opened) left out
        warm_taken, warm_cost = sampler.samples_taken, sampler.cost_ns_total
        cpu0 = time.process_time_ns()
        sampler.start()
        time.sleep(seconds)
        sampler.stop()
        process_cpu = time.process_time_ns() - cpu0
        passes = sampler.samples_taken - warm_taken
        per_pass = (sampler.cost_ns_total - warm_cost) / passes
        members = len(sampler.latest()["processes"])
        return {
            "children": n,
            "members": members,
            "passes": passes,
            "per_pass_us": per_pass / 1e3,
            "pct_one_core": per_pass * hz / 1e9 * 100,
            "process_pct_one_core": process_cpu / (seconds * 1e9) * 100,
        }
    finally:
        os.killpg(root.pid, 9)
        root.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--hz", type=float, default=10.0)
    ap.add_argument("--smaps-every", type=int, default=10)
    ap.add_argument("--heavy", action="store_true", help="children inherit numpy's mappings")
    ap.add_argument("--threads", action="store_true", help="per-thread sampling on")
    ap.add_argument("--total-budget", type=float, default=0.0,
                    help="whole-sampler budget, %% of a core (dldoctor run uses 1)")
    args = ap.parse_args()

    print(f"sampler at {args.hz:g} Hz, smaps_rollup every {args.smaps_every}th pass, "
          f"{args.seconds:g} s per tree, {os.cpu_count()} CPUs, "
          f"{len([d for d in os.listdir('/proc') if d.isdigit()])} processes on the machine")
    print(f"{'children':>8} {'sampled':>7} {'passes':>6} {'us/pass':>9} "
          f"{'% of 1 core':>11} {'whole process %':>15}")
    over = False
    for n in args.sizes:
        r = measure(n, args.seconds, args.hz, args.smaps_every, args.heavy, args.threads,
                    args.total_budget)
        print(f"{r['children']:>8} {r['members']:>7} {r['passes']:>6} {r['per_pass_us']:>9.0f} "
              f"{r['pct_one_core']:>11.2f} {r['process_pct_one_core']:>15.2f}")
        if n >= 64 and r["pct_one_core"] > BUDGET_PCT:
            over = True
    print(f"budget: <= {BUDGET_PCT:g}% of one core at 10 Hz for 64 workers: "
          f"{'OVER' if over else 'met'}")
    return 1 if over else 0


if __name__ == "__main__":
    sys.exit(main())
