"""Batches the workers make quickly and the main process is slow to receive: each sample is a
record of many small fields (the features of a tabular or text record), so the default collate
makes a batch of 32 tensors, and under torch's default file_descriptor sharing strategy each
one is passed from its worker to the main process by a round trip of its own. The workers
keep well ahead of a 40 ms training step, yet the loop waits for every batch's hand-over.

Healthy twin (`--healthy`): the same fields stacked into one tensor per sample, one tensor a
batch. `--strategy file_system`: the fields kept apart, the sharing strategy the report
prescribes (set before the loader starts its workers).

`--busy-step --fields 8`: the same bottleneck behind a step of torch ops that keeps every core
busy: a batch of 8 tensors, and the main process's threads queued for the cores they fill
themselves. The hand-over is a smaller part of the loop, but still the part a setting buys
back (file_system, or one stacked tensor: ~8% more batches a second on 2 cores).
"""

import time

import torch
import torch.multiprocessing
from _common import consume, parser
from torch.utils.data import DataLoader, Dataset

FIELDS = 32
# The training step: long enough that one tensor a batch is handed over well within the 5%
# a loader that keeps up may cost the loop (~1 ms here), while 32 take a fifth of it or more.
STEP_S = 0.04


def step(batch) -> None:
    time.sleep(STEP_S)


def busy_step(weights: torch.Tensor):
    """A step of STEP_S computing on torch's threads (matrix products), as a model's does."""

    def run(batch) -> None:
        x = weights[:256]
        end = time.perf_counter() + STEP_S
        while time.perf_counter() < end:
            x = torch.tanh(x @ weights)

    return run


class Records(Dataset):
    def __init__(self, stacked: bool, fields: int = FIELDS):
        self.stacked = stacked
        self.fields = fields

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        if self.stacked:
            return torch.arange(self.fields * 8, dtype=torch.float32).view(self.fields, 8) + i
        return {f"field{k}": torch.full((8,), float(i + k)) for k in range(self.fields)}


def main():
    ap = parser(__doc__)
    ap.add_argument("--strategy", choices=("file_descriptor", "file_system"), default=None)
    ap.add_argument("--fields", type=int, default=FIELDS, help="tensors a sample holds")
    ap.add_argument("--busy-step", action="store_true", help="a step of torch ops, not a sleep")
    args = ap.parse_args()
    if args.strategy:
        torch.multiprocessing.set_sharing_strategy(args.strategy)
    loader = DataLoader(Records(args.healthy, args.fields), batch_size=16, num_workers=2)
    run = busy_step(torch.randn(512, 512) / 16) if args.busy_step else step
    print("batches:", consume(loader, args.seconds, step=run))


if __name__ == "__main__":
    main()
