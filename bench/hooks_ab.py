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

from overhead import Tiny, cpu_ns  # the same tiny dataset and CPU reading


def job(rounds: int, block: int, out: str) -> None:
    from torch.utils.data import DataLoader
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
    data = Tiny(((block + settle) * rounds * len(variants) + 1000) * 8)
    it = iter(DataLoader(data, batch_size=8, num_workers=0))
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
    _write(times, out)


def job_workers(rounds: int, block: int, workers: int, out: str) -> None:
    """Loaders with workers: their hooks run in the workers (fetch, index queue) and the main
    process (hand-out, wait), so the two ways alternate by epoch. Each epoch forks its workers
    under the way it times: `plain` with every patch of dldoctor put back to torch's original
    (no worker learns it is watched), `hooks` as installed. The first `settle` batches of an
    epoch (the workers' start) are not timed: the figure is the per-batch cost. Three processes
    on few cores hand batches through pipes, so an epoch's wall time swings with the
    scheduler; the CPU time the job and its watcher spend per batch (every thread's, in ns
    from /proc/<pid>/task/*/schedstat) is the steadier figure, and what a job that keeps
    every core busy loses."""
    from torch.utils.data import DataLoader

    from dldoctor.job.install import PATCHES

    patches = list(PATCHES.applied)
    if not patches:
        raise SystemExit("hooks_ab: the batch hooks are not installed (run it under dldoctor run)")
    settle = 50
    data = Tiny((block + settle) * 8)
    loader = DataLoader(data, batch_size=8, num_workers=workers, multiprocessing_context="fork")

    def use(hooked: bool) -> None:
        for owner, name, orig, wrapper in patches:
            setattr(owner, name, wrapper if hooked else orig)

    times: dict[str, list[float]] = {"plain": [], "hooks": []}
    cpu: dict[str, list[float]] = {"plain": [], "hooks": []}
    clock = time.perf_counter_ns
    watcher = os.getppid()  # dldoctor run is the job's parent
    try:
        for r in range(rounds + 1):
            for name in ("plain", "hooks") if r % 2 == 0 else ("hooks", "plain"):
                use(name == "hooks")
                it = iter(loader)
                for _ in range(settle):
                    next(it)
                pids = [os.getpid(), watcher] + [w.pid for w in it._workers]
                c, t = sum(map(cpu_ns, pids)), clock()
                for _ in range(block):
                    next(it)
                t, c = clock() - t, sum(map(cpu_ns, pids)) - c
                if r:  # round 0 warms both up
                    times[name].append(t / block)
                    cpu[name].append(c / block)
                del it
    finally:
        use(True)
    _write(times, out)
    _write(cpu, out, "CPU (job + watcher)", "a")


def _write(times: dict, out: str, what: str = "wall", mode: str = "w") -> None:
    with open(out, mode) as f:
        f.write(f"-- {what} time\n")
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
    ap.add_argument("--rounds", type=int, help="default: 1500 (--workers 0), 60 (with workers)")
    ap.add_argument("--block", type=int, help="default: 500 (--workers 0), 300 (with workers)")
    ap.add_argument("--workers", type=int, default=0, help="num_workers (fork); default 0")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.rounds is None:
        args.rounds = 60 if args.workers else 1500
    if args.block is None:
        args.block = 300 if args.workers else 500
    if args.job:
        if args.workers:
            job_workers(args.rounds, args.block, args.workers, args.job)
        else:
            job(args.rounds, args.block, args.job)
        return 0
    with tempfile.TemporaryDirectory(prefix="dldoctor-hooks-ab-") as tmp:
        out = os.path.join(tmp, "result.txt")
        me = os.path.abspath(__file__)
        cmd = [sys.executable, "-m", "dldoctor", "run", "-q", "--", sys.executable, me]
        cmd += ["--rounds", str(args.rounds), "--block", str(args.block)]
        cmd += ["--workers", str(args.workers), "--job", out]
        rc = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if not os.path.exists(out):
            sys.stderr.write(rc.stderr[-4000:])
            raise SystemExit(f"hooks_ab: the job failed (exit {rc.returncode})")
        with open(out) as f:
            print(f.read(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
