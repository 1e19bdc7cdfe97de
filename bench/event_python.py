"""What dldoctor's instrumentation costs from Python (budgets, DESIGN.md §6):

1. one event recorded from Python (`_ext.trace_emit`): <= 1 us;
2. what the hooks add to one batch, timed directly in thread CPU time (worker side; whole
   single-process path), steady (a fast stream measured as a sample) and with every batch
   measured (a loader under 2,000 batches/s); and the single-process `_next_data` hook alone
   against torch's own, called directly (the one hook an unmeasured num_workers=0 batch pays);
3. whole-loop throughput of a watched DataLoader against the same loop unwatched, measured
   alternately in one process (install()/uninstall() between rounds, fresh forked workers
   each round): >= 98% on a tiny-batch worst case (thousands of batches/s), >= 99.5% on a
   typical one (4 KiB samples, batch 64, 2 workers). Cases: tiny-0 (trivial samples,
   num_workers=0: tens of thousands of batches/s, far past the budget's regime), tiny-5k
   (~20 us samples, num_workers=0: the budget's "thousands of batches/s"), tiny-2 (trivial
   samples, 2 fork workers: bound by PyTorch's inter-process transfer), typical.

    python bench/event_python.py [--rounds 7] [--batches 3000] [--skip-loops] [--kinds ...]

Each round also reports CPU seconds per batch (this process plus its reaped worker processes):
on a shared 2-core machine the wall-clock ratio swings by +-10% with the neighbours' load, and
the CPU ratio is the steadier, conservative figure (it counts every hook cycle as if it were on
the critical path).

The ring is drained between rounds (the watcher drains it from another process in a real
run); its capacity holds a whole round, so no event is dropped and refused emits, which are
cheaper, cannot flatter the numbers.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import timeit

from dldoctor import _ext
from dldoctor.job import hooks as torch_hooks
from dldoctor.job.worker import CTX

EMIT_BUDGET_NS = 1000
TINY_BUDGET = 0.98
TYPICAL_BUDGET = 0.995
WARMUP_BATCHES = 50  # worker start-up and first-touch costs stay out of the timed part


def emit_cost(ring_path: str, n: int = 1_000_000) -> dict:
    ring = _ext.EventRing.open(ring_path)
    _ext.trace_open(ring_path)
    emit = _ext.trace_emit
    out = {}
    for label, stmt in (
        ("positional, 10 values", "emit(2, 1, 0, 5, 64, 12345, 1, 2, 3, 4)"),
        ("positional, t_ns=0 (now)", "emit(3, 1, 0, 5, 0, 0, 1, 2, 3)"),
        ("with a keyword", "emit(2, 1, 0, 5, 64, 12345, 1, 2, 3, 4, flags=1)"),
    ):
        best = float("inf")
        for _ in range(5):
            ring.drain()
            best = min(best, timeit.timeit(stmt, globals={"emit": emit}, number=n // 5) / (n // 5))
        out[label] = best * 1e9
    base = min(timeit.repeat("f()", globals={"f": lambda: None}, number=n // 5, repeat=5)) / (
        n // 5
    )
    out["(an empty Python call, for scale)"] = base * 1e9
    ring.drain()
    ring.close()
    return out


def hook_cost_per_batch(ring, run_dir: str, rounds: int = 15) -> dict:
    """CPU ns the hooks add to one batch, timed directly in this process on this thread's
    CPU clock (steadier than wall time on a shared machine), plain and hooked runs
    alternated, medians: the worker side (torch's fetcher with default_collate, called as a
    worker loop calls it) and a whole single-process loop (hand-out, fetch and collate
    hooks). Each at two regimes: steady (a fast stream after its first 0.1 s, measured as a
    sample) and every batch measured (what a loader under 2,000 batches/s pays on each)."""
    from torch.utils.data import DataLoader
    from torch.utils.data._utils.collate import default_collate
    from torch.utils.data._utils.fetch import _MapDatasetFetcher

    index = list(range(8))
    fetcher = _MapDatasetFetcher(list(range(8)), True, default_collate, False)
    n_fetch, n_loop = 20_000, 20_000
    loader = DataLoader(list(range(8 * n_loop)), batch_size=8)

    def fetch_ns(n: int = n_fetch) -> float:
        t = time.thread_time_ns()
        for _ in range(n):
            fetcher.fetch(index)
        return (time.thread_time_ns() - t) / n

    def loop_ns() -> float:
        t = time.thread_time_ns()
        for _ in loader:
            pass
        return (time.thread_time_ns() - t) / n_loop

    def hooked(measure, steady: bool, worker: bool) -> float:
        torch_hooks.install(ring.path, run_dir)
        try:
            if worker:
                CTX.begin_worker(1, 0)  # as inside worker 0 of loader 1
                if steady:
                    fetch_ns(2 * n_fetch)  # past the first rate window
            elif steady:
                loop_ns()  # the loader's first epoch: its next one starts sampled
            return measure()
        finally:
            CTX.loader, CTX.worker = 0, -1
            torch_hooks.uninstall()
            ring.drain()

    fetch_ns(), loop_ns()  # warm caches outside the comparison
    out = {}
    for label, measure, worker in (
        ("worker side (fetch of 8 ints + default_collate)", fetch_ns, True),
        ("single-process loop, whole batch", loop_ns, False),
    ):
        for steady in (True, False):
            plain, watched = [], []
            for r in range(rounds):
                for is_watched in (False, True) if r % 2 == 0 else (True, False):
                    if is_watched:
                        watched.append(hooked(measure, steady, worker))
                    else:
                        plain.append(measure())
            regime = "steady, a sample" if steady else "every batch measured"
            out[f"{label}, {regime}"] = (statistics.median(plain), statistics.median(watched))
    return out


def next_data_hook_cost(ring, run_dir: str, rounds: int = 60, calls: int = 5000) -> dict:
    """The single-process `_next_data` hook alone, per call, in thread CPU time: torch's own
    `_next_data` and the hook (which calls it) on the same watched iterator, past its first
    rate window, alternated; (min, median) of the rounds. The minimum is the steadiest
    figure on a shared machine (its neighbours only ever add). What this adds to one batch
    is all a num_workers=0 loop pays per unmeasured batch: its fetch calls no hook."""
    import torch.utils.data.dataloader as dl
    from torch.utils.data import DataLoader

    torch_hooks.install(ring.path, run_dir)
    try:
        hook = dl._SingleProcessDataLoaderIter.__dict__["_next_data"]
        n = 20_000 + rounds * calls
        it = iter(DataLoader(list(range(8 * n)), batch_size=8))
        for _ in range(20_000):
            next(it)
        out: dict = {"torch's _next_data": [], "hooked _next_data": []}
        for r in range(rounds):
            for label in out if r % 2 == 0 else reversed(list(out)):
                fn = hook.original if label.startswith("torch") else hook
                t = time.thread_time_ns()
                for _ in range(calls // 2):
                    fn(it)
                out[label].append((time.thread_time_ns() - t) / (calls // 2))
            ring.drain()
        return {k: (min(v), statistics.median(v)) for k, v in out.items()}
    finally:
        torch_hooks.uninstall()
        ring.drain()


def make_loader(kind: str, batches: int):
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Tiny(Dataset):  # the worst case: almost no work per sample, many batches
        def __len__(self):
            return batches * 8

        def __getitem__(self, i):
            return i

    class Cheap(Tiny):  # ~20 us of Python per sample: a few thousand batches/s in-process
        def __getitem__(self, i):
            return sum(range(1500)) + i

    class Typical(Dataset):  # 4 KiB samples, batch 64
        def __init__(self):
            self.base = torch.arange(1024, dtype=torch.float32)

        def __len__(self):
            return batches * 64

        def __getitem__(self, i):
            return self.base + i

    if kind == "tiny-0":
        return DataLoader(Tiny(), batch_size=8, num_workers=0)
    if kind == "tiny-5k":
        return DataLoader(Cheap(), batch_size=8, num_workers=0)
    if kind == "tiny-2":
        return DataLoader(Tiny(), batch_size=8, num_workers=2, multiprocessing_context="fork")
    return DataLoader(Typical(), batch_size=64, num_workers=2, multiprocessing_context="fork")


def _cpu_s() -> float:
    import resource

    me = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)  # workers, once joined
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def one_round(kind: str, batches: int) -> tuple[float, float]:
    """(batches per second after warm-up, CPU seconds per batch over the whole round)."""
    cpu0 = _cpu_s()
    it = iter(make_loader(kind, batches))
    for _ in range(WARMUP_BATCHES):
        next(it)
    n = 0
    t0 = time.perf_counter()
    for _ in it:
        n += 1
    dt = time.perf_counter() - t0
    del it  # exhausted: its workers were joined, so their CPU time is in RUSAGE_CHILDREN
    return n / dt, (_cpu_s() - cpu0) / (n + WARMUP_BATCHES)


def loop_ratio(kind: str, rounds: int, batches: int, ring, run_dir: str) -> dict:
    watched, plain = [], []
    one_round(kind, min(batches, 400))  # warm imports and caches outside the comparison
    for r in range(rounds):
        for is_watched in (False, True) if r % 2 == 0 else (True, False):
            if is_watched:
                torch_hooks.install(ring.path, run_dir)
                watched.append(one_round(kind, batches))
                torch_hooks.uninstall()
                ring.drain()
            else:
                plain.append(one_round(kind, batches))
    wall = [w[0] / p[0] for w, p in zip(watched, plain)]
    cpu_p = statistics.median(p[1] for p in plain)
    cpu_w = statistics.median(w[1] for w in watched)
    return {
        "plain_batches_per_s": statistics.median(p[0] for p in plain),
        "watched_batches_per_s": statistics.median(w[0] for w in watched),
        "median_pair_ratio": statistics.median(wall),
        "pair_ratios": [round(x, 3) for x in wall],
        "cpu_us_per_batch": (cpu_p * 1e6, cpu_w * 1e6),
        "cpu_ratio": cpu_p / cpu_w,
        "dropped": ring.dropped,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--batches", type=int, default=3000)
    ap.add_argument("--skip-loops", action="store_true")
    ap.add_argument("--kinds", nargs="+", default=["tiny-0", "tiny-5k", "tiny-2", "typical"])
    args = ap.parse_args(argv)
    # "--kinds tiny-0,tiny-2" as well as "--kinds tiny-0 tiny-2"; an unknown kind is an error,
    # not a section that prints nothing.
    args.kinds = [k for arg in args.kinds for k in arg.split(",") if k]
    unknown = set(args.kinds) - {"tiny-0", "tiny-5k", "tiny-2", "typical"}
    if unknown:
        ap.error(f"unknown --kinds {', '.join(sorted(unknown))}")
    run_dir = tempfile.mkdtemp(prefix="dldoctor-bench-")
    ring = _ext.EventRing.create(os.path.join(run_dir, "events.ring"), 1 << 20)
    try:
        print("== one event from Python (budget <= 1000 ns)")
        for label, ns in emit_cost(ring.path).items():
            print(f"  {label:36s} {ns:7.1f} ns")
        _ext.trace_close()
        print("== hook cost per batch, thread CPU time, median of alternated rounds")
        for label, (plain, hooked) in hook_cost_per_batch(ring, run_dir).items():
            print(f"  {label:70s} {plain:7.0f} ns -> {hooked:7.0f} ns  (+{hooked - plain:.0f} ns)")
        ring.drain()
        print("== the single-process _next_data hook alone, thread CPU time per call")
        costs = next_data_hook_cost(ring, run_dir)
        base_min, base_med = costs["torch's _next_data"]
        for label, (lo, med) in costs.items():
            print(
                f"  {label:22s} min {lo:6.0f} ns (+{lo - base_min:4.0f})  "
                f"median {med:6.0f} ns (+{med - base_med:4.0f})"
            )
        if args.skip_loops:
            return 0
        print(f"== whole loop, watched / unwatched, {args.rounds} alternating rounds")
        for kind, budget, batches in (
            ("tiny-0", TINY_BUDGET, args.batches * 3),
            ("tiny-5k", TINY_BUDGET, args.batches),
            ("tiny-2", TINY_BUDGET, args.batches),
            ("typical", TYPICAL_BUDGET, max(args.batches // 6, 300)),
        ):
            if kind not in args.kinds:
                continue
            r = loop_ratio(kind, args.rounds, batches, ring, run_dir)
            p_cpu, w_cpu = r["cpu_us_per_batch"]
            print(
                f"  {kind:8s} wall: plain {r['plain_batches_per_s']:7.0f}/s watched "
                f"{r['watched_batches_per_s']:7.0f}/s ratio {r['median_pair_ratio']:.3f} "
                f"{r['pair_ratios']}"
            )
            print(
                f"  {'':8s} cpu : plain {p_cpu:7.1f} us/batch watched {w_cpu:7.1f} us/batch "
                f"ratio {r['cpu_ratio']:.4f} (+{w_cpu - p_cpu:.1f} us)  budget {budget}: "
                f"{'ok' if r['cpu_ratio'] >= budget else 'OVER'}  dropped {r['dropped']}"
            )
            sys.stdout.flush()
    finally:
        torch_hooks.uninstall()
        ring.close()
        import shutil

        shutil.rmtree(run_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
