"""Field guide cause 1: CPU-bound workers, more of them than the cores they may use.

Six workers that compute in __getitem__ are pinned, with the main process, to one core.
Healthy twin (`--healthy`): one worker on that core: slow, but not oversubscribed.
"""

import os

import torch
from _common import burn_cpu, consume, parser
from torch.utils.data import DataLoader, Dataset


class Compute(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        burn_cpu(0.015)  # 60 ms of CPU per batch: one core cannot feed a 20 ms step
        return torch.full((16,), float(i))


def main():
    args = parser(__doc__).parse_args()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    workers = 1 if args.healthy else 6
    loader = DataLoader(Compute(), batch_size=4, num_workers=workers)
    print("batches:", consume(loader, args.seconds))


if __name__ == "__main__":
    main()
