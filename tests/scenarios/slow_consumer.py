"""Healthy: a fast loader and a slow consumer that waits (as on a GPU step).

The doctor must stay quiet: no finding about the loader, verdict healthy.
`--busy`: the consumer burns CPU in the main process instead: healthy, with
main_process_bound as info.
"""

import time

import torch
from _common import burn_cpu, consume, parser
from torch.utils.data import DataLoader, Dataset


class Small(Dataset):
    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        return torch.full((64,), float(i))


def main():
    ap = parser(__doc__)
    ap.add_argument("--busy", action="store_true", help="burn CPU in the consumer")
    args = ap.parse_args()
    loader = DataLoader(Small(), batch_size=16, num_workers=1)
    step = (lambda b: burn_cpu(0.05)) if args.busy else (lambda b: time.sleep(0.05))
    print("batches:", consume(loader, args.seconds, step=step))


if __name__ == "__main__":
    main()
