"""Field guide cause 1: CPU-bound workers, more of them than the cores they may use.

Six workers that compute in __getitem__ are pinned, with the main process, to one core.
Healthy twin (`--healthy`): one worker on that core, with work it can do within the step.
"""

import os

import torch
from _common import burn_cpu, consume, parser
from torch.utils.data import DataLoader, Dataset


class Compute(Dataset):
    def __init__(self, cost_s):
        self.cost_s = cost_s

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        burn_cpu(self.cost_s)
        return torch.full((16,), float(i))


def main():
    args = parser(__doc__).parse_args()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    workers = 1 if args.healthy else 6
    # 60 ms of CPU per batch: one core cannot feed the 20 ms step with any number of workers.
    # The twin's 12 ms per batch fits in the step, on the same single core.
    cost = 0.003 if args.healthy else 0.015
    loader = DataLoader(Compute(cost), batch_size=4, num_workers=workers)
    print("batches:", consume(loader, args.seconds))


if __name__ == "__main__":
    main()
