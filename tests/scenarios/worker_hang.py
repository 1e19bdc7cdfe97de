"""worker_hang: __getitem__ waits on an event that is never set (a lost message, a
reader with no writer). The worker sleeps forever; no batch comes.
Healthy twin (`--healthy`): the event is set before the loader starts.
"""

import threading

import torch
from _common import consume, parser
from torch.utils.data import DataLoader, Dataset


class Waits(Dataset):
    def __init__(self, ready):
        self.ready = ready

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        self.ready.wait()
        return torch.full((8,), float(i))

    def __getstate__(self):
        return {"ready": None}

    def __setstate__(self, state):
        self.ready = _READY


_READY = threading.Event()


def main():
    args = parser(__doc__).parse_args()
    if args.healthy:
        _READY.set()
    loader = DataLoader(Waits(_READY), batch_size=4, num_workers=1)
    print("batches:", consume(loader, args.seconds))


if __name__ == "__main__":
    main()
