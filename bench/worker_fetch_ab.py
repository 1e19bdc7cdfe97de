"""What a worker's fetch hook adds to one fetch, in this process playing a DataLoader worker:

    python bench/worker_fetch_ab.py [--rounds 15] [--block 200] [--gap-us 0,200,500,1000]

Torch's own `_MapDatasetFetcher` (batches of 8 ints, `default_collate`) is called as a
worker's loop calls it, in blocks that alternate between torch's `fetch` (plain) and the
installed hook (hooked), plain-hooked-plain in every round. Between two fetches the loop
spins for `--gap-us` (not a sleep: a sleep's wake-up is longer than the gap), which sets the
fetch rate the hook's sample sees and how cold its memory is when it runs. A hooked block is
all measured while the hooked fetches come under trace::kSampleAbovePerSecond a second (its
rate counts the plain blocks' time too); a longer `--block` at a short gap makes it a
sample. Figures: the median over rounds of each side's mean time per fetch, their ratio, and
how many of a hooked block's fetches were measured (events in the ring). `--pass-through`
adds a third side to each round, after the hooked block, a C hook that only calls torch's fetch
through (what calling it from C costs, apart from the hook's own work), and prints the median
of the rounds' paired differences against plain.

A worker of the `num_workers=2` tiny-batch loop in bench/overhead.py fetches ~700 times a
second, so every fetch is measured there: the `--gap-us 1000` row is the closest to it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--block", type=int, default=200)
    ap.add_argument("--gap-us", default="0,200,500,1000")
    ap.add_argument("--pass-through", action="store_true")
    a = ap.parse_args()

    from torch.utils.data._utils.collate import default_collate
    from torch.utils.data._utils.fetch import _MapDatasetFetcher

    from dldoctor import _ext
    from dldoctor.job import hooks, install, worker

    tmp = tempfile.mkdtemp(prefix="dldoctor-fetch-ab-")
    ring = _ext.EventRing.create(os.path.join(tmp, "events.ring"), 1 << 16)
    if not hooks.install(ring.path, tmp):
        raise SystemExit("worker_fetch_ab: the hooks could not be installed")
    install.patch_fetchers()
    hooked = _MapDatasetFetcher.__dict__["fetch"]
    plain = hooked.__dldoctor_orig__
    data = list(range(10**7))
    # One fetcher a side: nothing the hook leaves on a fetcher (an experiment kept its
    # collate hook in place between fetches) reaches torch's side.
    # An index_get-role hook calls through and, given a batch (not a task tuple), only counts
    # an epoch in the context: nothing else of the hook runs.
    passthru = _ext.hot_method("index_get", plain)
    fetchers = {
        id(f): _MapDatasetFetcher(data, True, default_collate, False)
        for f in (plain, hooked, passthru)
    }
    worker.CTX.begin_worker(1, 0)  # this process is worker 0 of loader 1

    clock = time.perf_counter_ns
    for gap_us in (float(g) for g in a.gap_us.split(",")):
        gap_ns = int(gap_us * 1000)
        start = 0

        def block(fn, gap_ns: int = gap_ns) -> float:
            nonlocal start
            total = 0
            fetcher = fetchers[id(fn)]
            for i in range(start, start + a.block):
                idx = list(range(i * 8, i * 8 + 8))
                t = clock()
                fn(fetcher, idx)
                total += clock() - t
                end = clock() + gap_ns
                while clock() < end:
                    pass
            start += a.block
            return total / a.block

        plains, hookeds, passes, ratios, measured = [], [], [], [], []
        for _ in range(a.rounds):
            p0 = block(plain)
            ring.drain()
            h = block(hooked)
            measured.append(len(ring.drain()))
            if a.pass_through:
                passes.append(block(passthru))
            p1 = block(plain)
            plains.append((p0 + p1) / 2)
            hookeds.append(h)
            ratios.append(h / ((p0 + p1) / 2))
        print(
            f"gap {gap_us:6.0f} us: plain {statistics.median(plains) / 1e3:6.2f} us a fetch, "
            f"hooked {statistics.median(hookeds) / 1e3:6.2f} us "
            f"(+{(statistics.median(hookeds) - statistics.median(plains)) / 1e3:.2f}), "
            f"ratio {statistics.median(ratios):.3f}, measured {statistics.median(measured):.0f} "
            f"of {a.block}",
            flush=True,
        )
        if a.pass_through:
            hooked_d = statistics.median(h - p for h, p in zip(hookeds, plains)) / 1e3
            pass_d = statistics.median(q - p for q, p in zip(passes, plains)) / 1e3
            print(
                f"  paired against plain: hooked {hooked_d:+.2f} us, pass-through {pass_d:+.2f} us",
                flush=True,
            )
    worker.CTX.loader = 0
    hooks.uninstall()
    ring.close()


if __name__ == "__main__":
    sys.exit(main())
