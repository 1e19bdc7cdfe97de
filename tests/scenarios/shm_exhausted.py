"""Field guide cause 3: the batches in flight do not fit in /dev/shm.

Two workers pass 2 MiB batches with prefetch_factor 8: 2 x 8 + 1 = 17 batches (34 MiB) in
flight. Run it where /dev/shm is small, as the tests do:

    unshare -rm sh -c 'mount -t tmpfs -o size=24m tmpfs /dev/shm && exec python shm_exhausted.py'

and the collate in a worker fails with "No space left on device". `--tight` (prefetch_factor
4: 18 MiB) fits, with little margin; `--healthy` (prefetch_factor 2: 10 MiB) fits with room.
`--sigbus`: the batches are small, but the dataset caches every sample in its own mmap'ed
file in /dev/shm (a shared cache) and dies of SIGBUS when the tmpfs has no page left to give.

`--ddp` (run it under torchrun with two ranks): each rank is a DDP main process over gloo
whose loader keeps 2 x 3 + 1 = 7 batches (14 MiB) in flight: one rank alone fits in the 24 MiB
/dev/shm, the node's two ranks together (28 MiB) do not, and a worker fails to send.
"""

import atexit
import glob
import mmap
import os
import time

import torch
from _common import consume, parser
from torch.utils.data import DataLoader, Dataset

MIB = 1 << 20
CACHE_GLOB = "/dev/shm/dldoctor-scenario-cache-*"


class Blocks(Dataset):
    """Samples of `sample_bytes` float32 zeros (4 per batch)."""

    def __init__(self, sample_bytes, cache_mib=0):
        self.numel = sample_bytes // 4
        self.cache_left = cache_mib * MIB

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        if self.cache_left > 0:
            self.cache_left -= MIB
            # A cache the workers share through /dev/shm: the file is sized first (no
            # space is taken yet), the pages on the first write. A full tmpfs cannot give
            # one, and the write dies of SIGBUS.
            path = f"/dev/shm/dldoctor-scenario-cache-{os.getpid()}-{i}"
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                os.ftruncate(fd, MIB)
                with mmap.mmap(fd, MIB) as m:
                    m[:] = b"\x01" * MIB
            finally:
                os.close(fd)
        return torch.zeros(self.numel)


def remove_cache():
    for path in glob.glob(CACHE_GLOB):
        try:
            os.unlink(path)
        except OSError:
            pass


def main():
    ap = parser(__doc__)
    ap.add_argument("--tight", action="store_true", help="prefetch_factor 4: fits, little margin")
    ap.add_argument("--sigbus", action="store_true", help="small batches, a shared cache")
    ap.add_argument("--prefetch", type=int, default=None)
    ap.add_argument("--ddp", action="store_true", help="a rank of a torchrun job (prefetch 3)")
    args = ap.parse_args()
    prefetch = args.prefetch or (2 if args.healthy else 4 if args.tight else 3 if args.ddp else 8)
    if args.ddp:
        from _ddp import start, train
        from torch.utils.data import DistributedSampler

        data = Blocks(MIB // 2)
        start()
        sampler = DistributedSampler(data, shuffle=False)
        loader = DataLoader(
            data, batch_size=4, num_workers=2, prefetch_factor=prefetch, sampler=sampler
        )
        train(loader, args.seconds, data.numel)
        return
    if args.sigbus:
        atexit.register(remove_cache)
        data = Blocks(16 << 10, cache_mib=64)  # on a big /dev/shm: 128 MiB, then removed
        prefetch = 2
    else:
        data = Blocks(MIB // 2)  # 4 x 512 KiB = 2 MiB per batch
    loader = DataLoader(data, batch_size=4, num_workers=2, prefetch_factor=prefetch)

    def step(_batch):
        time.sleep(0.03)  # a consumer slower than the workers: their queues fill

    print("batches:", consume(loader, args.seconds, step))


if __name__ == "__main__":
    main()
