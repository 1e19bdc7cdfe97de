"""A worker that exits on its own: os._exit(3) in __getitem__ after saying why on stderr,
the way a library's fatal error path does. torch then raises "DataLoader worker (pid(s) N)
exited unexpectedly" in the main process, without the reason.

Healthy twin (`--healthy`): the same loader, no exit.
"""

import os
import sys
import time

from _common import consume, parser
from torch.utils.data import DataLoader, Dataset, get_worker_info


class Shards(Dataset):
    def __init__(self, exit_at):
        self.exit_at = exit_at

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        info = get_worker_info()
        if self.exit_at is not None and info is not None and info.id == 1 and i >= self.exit_at:
            print(f"loading shard {i // 8}", file=sys.stderr)
            print(f"fatal: shard {i // 8} is corrupt, giving up", file=sys.stderr)
            sys.stderr.flush()
            os._exit(3)
        return [i, i * 2]


def as_lists(batch):
    # Plain Python batches: no tensor crosses the queue, so no descriptor is being handed
    # over by the worker at the moment it exits.
    return batch


def main():
    args = parser(__doc__).parse_args()
    loader = DataLoader(
        Shards(None if args.healthy else 40),
        batch_size=8,
        num_workers=2,
        collate_fn=as_lists,
    )
    print("batches:", consume(loader, args.seconds, lambda b: time.sleep(0.01)))


if __name__ == "__main__":
    main()
