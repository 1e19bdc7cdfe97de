"""What the per-batch hooks cost a `num_workers=0` tiny-batch loop, inside one watched process:

    python bench/hooks_ab.py [--rounds 1500] [--block 500]

Runs itself under `dldoctor run` (the watcher reads the job as in any run) and alternates, on
one iterator, blocks of `--block` batches (batch_size 8 of ints, ~7 ms a block) between three
ways of calling torch: `plain` (torch's own `_next_data` put back), `hooks` (the installed
batch hook, measuring a sample as in a run) and `pass` (a C hook that only calls through: the
floor a C hook on `_next_data` costs). The main process hooks no other method per batch: a
single-process iterator's fetch is timed by its `_next_data` hook. Neighbours on a shared machine
slow runs by +-20% from one minute to the next, but hardly from one block to the next: the
figure is the median over rounds of the ratio plain / variant of adjacent blocks (the budget's
0.98 is the `hooks` ratio). Conservative for `hooks`: every plain block is a gap in its
stream, so its sample is measured up to twice as often as in an uninterrupted run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time


def job(rounds: int, block: int, out: str) -> None:
    from torch.utils.data import DataLoader, Dataset
    from torch.utils.data import dataloader as dl

    from dldoctor import _ext

    single = dl._SingleProcessDataLoaderIter
    hooked_next = single.__dict__["_next_data"]
    torch_next = getattr(hooked_next, "__dldoctor_orig__", None)
    if torch_next is None:
        raise SystemExit("hooks_ab: the batch hooks are not installed (run it under dldoctor run)")
    variants = {
        "plain": torch_next,
        "hooks": hooked_next,
        # A fetch-role hook called with one argument passes straight through.
        "pass": _ext.hot_method("fetch", torch_next),
    }
    settle = 50  # batches after each swap: the interpreter re-specializes the call sites

    class Tiny(Dataset):
        def __len__(self):
            return ((block + settle) * rounds * len(variants) + 1000) * 8

        def __getitem__(self, i):
            return i

    it = iter(DataLoader(Tiny(), batch_size=8, num_workers=0))
    for _ in range(500):
        next(it)
    times: dict[str, list[float]] = {k: [] for k in variants}
    clock = time.perf_counter_ns
    try:
        for r in range(rounds):
            for name in variants if r % 2 == 0 else reversed(variants):
                single._next_data = variants[name]
                for _ in range(settle):
                    next(it)
                t = clock()
                for _ in range(block):
                    next(it)
                times[name].append((clock() - t) / block)
    finally:
        single._next_data = hooked_next
    with open(out, "w") as f:
        for name, ts in times.items():
            if name == "plain":
                f.write(f"plain  {statistics.median(ts):7.0f} ns a batch (median block)\n")
                continue
            ratios = sorted(a / b for a, b in zip(times["plain"], ts))
            n = len(ratios)
            f.write(
                f"{name:6s} {statistics.median(ts):7.0f} ns a batch; paired ratio plain/{name}: "
                f"median {ratios[n // 2]:.4f} (quartiles {ratios[n // 4]:.3f}-"
                f"{ratios[3 * n // 4]:.3f}, {n} rounds)\n"
            )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=1500)
    ap.add_argument("--block", type=int, default=500)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.job:
        job(args.rounds, args.block, args.job)
        return 0
    with tempfile.TemporaryDirectory(prefix="dldoctor-hooks-ab-") as tmp:
        out = os.path.join(tmp, "result.txt")
        me = os.path.abspath(__file__)
        cmd = [sys.executable, "-m", "dldoctor", "run", "-q", "--", sys.executable, me]
        cmd += ["--rounds", str(args.rounds), "--block", str(args.block), "--job", out]
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if not os.path.exists(out):
            sys.stderr.write(rc.stderr[-4000:])
            raise SystemExit(f"hooks_ab: the job failed (exit {rc.returncode})")
        with open(out) as f:
            print(f.read(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
