"""straggler_worker: every 50th sample is 100x slower than the rest.

Samples take 2 ms (a sleep, like a read); every 50th takes 200 ms. Two workers keep up with
the loop on average, but batches are handed out in order: while the loop waits for the batch
holding a slow sample, the other worker's batches sit finished behind it.
Healthy twin (`--healthy`): every sample takes the same 2 ms.
"""

import time

import torch
from _common import consume, parser
from torch.utils.data import DataLoader, Dataset

BASE_S = 0.002
SLOW_EVERY = 50
SLOW_FACTOR = 100


class Uneven(Dataset):
    def __init__(self, uniform: bool):
        self.uniform = uniform

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        slow = not self.uniform and i % SLOW_EVERY == 0
        time.sleep(BASE_S * (SLOW_FACTOR if slow else 1))
        return torch.tensor(float(i))


def main():
    args = parser(__doc__).parse_args()
    loader = DataLoader(Uneven(uniform=args.healthy), batch_size=4, num_workers=2)
    print("batches:", consume(loader, args.seconds))


if __name__ == "__main__":
    main()
