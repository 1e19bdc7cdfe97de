"""cow_memory_growth: millions of small Python objects in a dataset read by forked workers.

The dataset keeps 3 million file paths in a Python list (the classic layout); two forked
workers read them in random order. Each read changes the string's reference count, a write
to the page that holds it, so each worker's private memory grows with the samples it reads.
Healthy twin (`--healthy`): the same paths in one numpy array of fixed-width bytes.
"""

import numpy as np
import torch
from _common import consume, parser
from torch.utils.data import DataLoader, Dataset

N = 3_000_000


class Paths(Dataset):
    def __init__(self, as_array: bool):
        paths = [f"/data/train/images/{i:08d}.jpg" for i in range(N)]
        if as_array:
            self.paths = np.array(paths, dtype="S32")  # one object: reads write nothing
        else:
            self.paths = paths  # three million objects, each with its reference count
        self.labels = np.arange(N, dtype=np.int64) % 1000

    def __len__(self):
        return N

    def __getitem__(self, i):
        p = self.paths[i]
        return torch.tensor(len(p) + int(self.labels[i]))


def main():
    ap = parser(__doc__)
    args = ap.parse_args()
    loader = DataLoader(
        Paths(as_array=args.healthy),
        batch_size=64,
        shuffle=True,
        num_workers=2,
        multiprocessing_context="fork",
    )
    print("batches:", consume(loader, args.seconds))


if __name__ == "__main__":
    main()
