"""worker_died: a DataLoader worker ends while the loop still waits for its batches.

`--cause exit` (default): worker 1 exits on its own, os._exit(3) in __getitem__ after saying
why on stderr, the way a library's fatal error path does. torch then raises "DataLoader
worker (pid(s) N) exited unexpectedly" in the main process, without the reason.
`--cause oom`: worker 0 keeps what it reads (a cache that never evicts, 32 MiB a sample)
until the OOM killer ends it at its memory cgroup's limit. The job moves itself into the
memory cgroup given with `--cgroup DIR` (made by the test, e.g. a child of the current one
with memory.limit_in_bytes 256 MiB) before it starts the loader, so the watcher outside is
not limited. Without `--cgroup` it stops growing at --cap-mib (default 512) instead of
meeting any limit.
Healthy twin (`--healthy`): the same loader, no exit / no cache.
"""

import os
import sys
import time

from _common import consume, join_cgroup, parser
from torch.utils.data import DataLoader, Dataset, get_worker_info

MIB = 1 << 20


class Shards(Dataset):
    """--cause exit: worker 1 gives up at sample `exit_at`."""

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


class Cached(Dataset):
    """--cause oom: worker 0 keeps `grow_mib` per sample read, up to `cap_mib`."""

    def __init__(self, grow_mib, cap_mib):
        self.grow = grow_mib * MIB
        self.cap = cap_mib * MIB
        self.kept = []

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        info = get_worker_info()
        if self.grow and info is not None and info.id == 0 and i >= 8:
            if len(self.kept) * self.grow < self.cap:
                self.kept.append(bytearray(b"\x01") * self.grow)  # touched: really resident
            time.sleep(0.02)
        return [i]


def as_lists(batch):
    # Plain Python batches: no tensor crosses the queue, so no descriptor is being handed
    # over by the worker at the moment it dies.
    return batch


def main():
    ap = parser(__doc__)
    ap.add_argument("--cause", choices=("exit", "oom"), default="exit", help="how the worker ends")
    ap.add_argument("--cgroup", help="memory cgroup directory to join before the loader starts")
    ap.add_argument("--cap-mib", type=int, default=512, help="--cause oom: most the cache keeps")
    args = ap.parse_args()
    if args.cgroup:
        join_cgroup(args.cgroup)
    if args.cause == "oom":
        data, batch_size = Cached(0 if args.healthy else 32, args.cap_mib), 2
    else:
        data, batch_size = Shards(None if args.healthy else 40), 8
    loader = DataLoader(data, batch_size=batch_size, num_workers=2, collate_fn=as_lists)
    print("batches:", consume(loader, args.seconds, lambda b: time.sleep(0.01)))


if __name__ == "__main__":
    main()
