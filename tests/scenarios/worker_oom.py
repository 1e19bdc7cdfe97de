"""A worker killed by the OOM killer: worker 0 keeps what it reads (a cache that never
evicts, 32 MiB a sample) until its memory cgroup's limit is reached.

The job moves itself into the memory cgroup given with `--cgroup DIR` (made by the test,
e.g. a child of the current one with memory.limit_in_bytes 256 MiB) before it starts the
loader, so the watcher outside is not limited. Without `--cgroup` it stops growing at
--cap-mib (default 512) instead of meeting any limit.
Healthy twin (`--healthy`): the same loader, no cache.
"""

import os
import time

from _common import consume, parser
from torch.utils.data import DataLoader, Dataset, get_worker_info

MIB = 1 << 20


class Cached(Dataset):
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
    return batch  # no tensor crosses the queue (no descriptor handed over at the kill)


def main():
    ap = parser(__doc__)
    ap.add_argument("--cgroup", help="memory cgroup directory to join before the loader starts")
    ap.add_argument("--cap-mib", type=int, default=512)
    args = ap.parse_args()
    if args.cgroup:
        with open(os.path.join(args.cgroup, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    loader = DataLoader(
        Cached(0 if args.healthy else 32, args.cap_mib),
        batch_size=2,
        num_workers=2,
        collate_fn=as_lists,
    )
    print("batches:", consume(loader, args.seconds, lambda b: time.sleep(0.01)))


if __name__ == "__main__":
    main()
