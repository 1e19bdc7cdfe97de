"""Thread pools oversubscribed inside the workers.

Two workers on two usable CPUs; each __getitem__ raises torch's intra-op pool to 8 threads
(as some preprocessing libraries do) and runs small matrix products, so 16 threads that want
a CPU fight over two: a several-fold slowdown. The consumer is fast, so the loop waits.
Healthy twins: `--healthy` caps the pool at 1 (what PyTorch itself sets in a worker);
`--idle` sets 8 threads but the work is pure Python, so the pool (created once at start)
sleeps; `--capped` asks numpy's OpenBLAS for 64 threads, which it caps at the core count,
and one worker uses them.
"""

import os
import sys

if "--capped" in sys.argv:  # read by OpenBLAS when numpy loads: before the import
    os.environ["OPENBLAS_NUM_THREADS"] = "64"

import numpy as np
import torch
from _common import burn_cpu, consume, parser
from torch.utils.data import DataLoader, Dataset


class MatrixWork(Dataset):
    def __init__(self, threads: int, mode: str):
        self.threads = threads
        self.mode = mode

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        if self.mode == "capped":
            a = np.random.rand(128, 128)
            return torch.tensor(float((a @ a).sum()))
        torch.set_num_threads(self.threads)  # what a library that "helps" might do
        if self.mode == "idle":
            burn_cpu(0.002)
            return torch.tensor(float(i))
        a = torch.randn(64, 64)
        b = torch.randn(64, 64)
        for _ in range(60):
            a = torch.tanh(a @ b * 0.01)
        return a.sum()


def warm_pool(worker_id):
    # --idle: create the 8-thread pool once, so it exists but then sleeps.
    torch.set_num_threads(8)
    torch.randn(512, 512) @ torch.randn(512, 512)


def main():
    ap = parser(__doc__)
    ap.add_argument("--idle", action="store_true", help="a large pool that sleeps")
    ap.add_argument("--capped", action="store_true", help="OpenBLAS asked for 64 threads")
    args = ap.parse_args()
    usable = sorted(os.sched_getaffinity(0))
    if len(usable) > 2:
        os.sched_setaffinity(0, set(usable[:2]))  # the scenario is two cores
    mode = "capped" if args.capped else "idle" if args.idle else "matmul"
    threads = 1 if args.healthy else 8
    workers = 1 if args.capped else 2
    loader = DataLoader(
        MatrixWork(threads, mode),
        batch_size=2 if args.capped else 4,
        num_workers=workers,
        worker_init_fn=warm_pool if args.idle else None,
    )
    print("batches:", consume(loader, args.seconds))


if __name__ == "__main__":
    main()
