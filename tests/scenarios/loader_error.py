"""A job that ends badly while its loader runs: the dataset raises, or the training step does.

Default: sample 13 of a map-style dataset is corrupt: its `__getitem__` raises
`ValueError: bad sample 13` (in a worker, or in the main process with --workers 0), and the
job dies of it. `--iterable`: an IterableDataset whose iterator raises after --bad-after
samples. `--collate`: the collate_fn raises on the batch holding sample 13 (samples of
different shapes). `--start-method spawn`: the workers are spawned.

Healthy twins: `--step-raises` (the training step raises after 30 batches: the job fails,
its loader did not), `--forever` (the loop runs until interrupted; it prints "ready" once
batches flow, for a test to send Ctrl-C), and `--healthy` (the same loop, nothing raises,
it ends on its own after --seconds).
"""

import multiprocessing
import sys
import time

import torch
from _common import Numbers, parser
from torch.utils.data import DataLoader, IterableDataset
from torch.utils.data._utils.collate import default_collate

BAD = 500  # in batch 31 (batch_size 16): 31 batches come first


class Corrupt(Numbers):
    """Sample BAD cannot be read (a truncated file, a bad record)."""

    def __init__(self, bad: int | None):
        super().__init__()
        self.bad = bad

    def __getitem__(self, i):
        if i == self.bad:
            raise ValueError(f"bad sample {i}")
        return super().__getitem__(i)


class Stream(IterableDataset):
    """A record stream whose reader fails after `bad_after` records."""

    def __init__(self, bad_after: int | None):
        self.bad_after = bad_after

    def __iter__(self):
        for i in range(1_000_000):
            if self.bad_after is not None and i == self.bad_after:
                raise OSError(f"record {i}: unexpected end of stream")
            yield torch.full((8,), float(i))


class Ragged(Numbers):
    """Sample BAD has another shape: default_collate cannot stack it with the others."""

    def __getitem__(self, i):
        return torch.zeros(9) if i == BAD else super().__getitem__(i)


def main():
    ap = parser(__doc__)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--start-method", default=None, choices=("fork", "spawn", "forkserver"))
    ap.add_argument("--iterable", action="store_true", help="an IterableDataset that raises")
    ap.add_argument("--bad-after", type=int, default=200)
    ap.add_argument("--collate", action="store_true", help="collate_fn raises")
    ap.add_argument("--step-raises", action="store_true", help="the training step raises")
    ap.add_argument("--forever", action="store_true", help="run until interrupted")
    args = ap.parse_args()
    quiet = args.healthy or args.step_raises or args.forever
    if args.iterable:
        dataset = Stream(None if quiet else args.bad_after)
    elif args.collate:
        dataset = Ragged() if not quiet else Numbers()
    else:
        dataset = Corrupt(None if quiet else BAD)
    ctx = multiprocessing.get_context(args.start_method) if args.start_method else None
    loader = DataLoader(
        dataset,
        batch_size=4 if args.collate else 16,
        num_workers=args.workers,
        collate_fn=default_collate,
        multiprocessing_context=ctx if args.workers else None,
    )
    # The clock starts at the first batch (spawned workers import torch first, seconds on a
    # loaded machine); a dataset that raises is read until it does, however long that takes.
    start = None
    for n, _batch in enumerate(loader):
        start = start or time.monotonic()
        time.sleep(0.01)
        if args.forever:
            if n == 20:
                print("ready", flush=True)
            continue
        if args.step_raises and n == 30:
            raise ValueError("loss is NaN at step 30")
        if quiet and time.monotonic() - start > args.seconds:
            break
    print("done", file=sys.stderr)


if __name__ == "__main__":
    main()
