"""worker_startup_cost: start-up paid every epoch (short epochs, spawn, a heavy dataset).

The dataset holds 100 MB of features in memory; the loader spawns its two workers anew for
each of several short epochs (persistent_workers=False), so every epoch starts two fresh
interpreters that import torch and unpickle the 100 MB before the first batch.
Healthy twin (`--healthy`): persistent_workers=True, the start-up is paid once.
"""

import numpy as np
import torch
from _common import model_step, parser
from torch.utils.data import DataLoader, Dataset


class InMemory(Dataset):
    def __init__(self):
        self.features = np.ones((100 * 1024 * 1024 // 4,), dtype=np.float32)  # 100 MB
        self.items = 96

    def __len__(self):
        return self.items

    def __getitem__(self, i):
        return torch.from_numpy(self.features[i * 16 : i * 16 + 16].copy())


def main():
    ap = parser(__doc__)
    ap.add_argument("--epochs", type=int, default=4)
    args = ap.parse_args()
    loader = DataLoader(
        InMemory(),
        batch_size=8,
        num_workers=2,
        multiprocessing_context="spawn",
        persistent_workers=args.healthy,
    )
    n = 0
    for _ in range(args.epochs):
        for batch in loader:
            model_step(batch)
            n += 1
    print("batches:", n)


if __name__ == "__main__":
    main()
