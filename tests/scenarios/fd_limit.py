"""A low RLIMIT_NOFILE with many tensors per batch under torch's default file_descriptor
sharing strategy: every tensor in flight is an open descriptor. The collate keeps the 16
tensors of each of 8 samples apart (128 per batch, 4 batches in flight), the job lowers its
own limit to 256, and a worker soon fails to send a batch ("Too many open files"); the batch
is lost, and the loader's timeout (5 s) ends the wait for it.

Healthy twin (`--healthy`): each sample's 16 parts stacked into one tensor, and the default
collate: one tensor a batch. (Kept apart, 16 tensors a batch take ~4 ms to hand over under the
same strategy, a fifth of the loop: slow_handover's case.)

`--in-child`: the job's own process keeps its limit and runs a healthy loader before and after;
a child process it starts (as a test suite does) lowers its own limit and runs the failing
loader. The limit quoted, and the fix, are the child's.
`--worker-nofile N`: the job keeps its limit; each worker lowers its own in worker_init_fn.
"""

import multiprocessing
import resource
import sys

import torch
from _common import consume, parser
from torch.utils.data import DataLoader, Dataset


class Parts(Dataset):
    def __init__(self, stacked: bool = False):
        self.stacked = stacked

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        parts = [torch.full((4,), float(i)) for _ in range(16)]
        return torch.stack(parts) if self.stacked else parts


def keep_apart(batch):
    return batch  # a list of samples, each a list of 16 tensors: 128 descriptors a batch


def lower_limit(nofile: int) -> None:
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, hard))


def run(args) -> int:
    if not args.worker_nofile:
        lower_limit(args.nofile)
    loader = DataLoader(
        Parts(stacked=args.healthy),
        batch_size=8,
        num_workers=2,
        collate_fn=None if args.healthy else keep_apart,
        timeout=args.timeout,
        worker_init_fn=(lambda _: lower_limit(args.worker_nofile)) if args.worker_nofile else None,
    )
    return consume(loader, args.seconds)


def in_child(args) -> None:
    print("batches:", run(args))


def main():
    ap = parser(__doc__)
    ap.add_argument("--nofile", type=int, default=256)
    ap.add_argument("--timeout", type=float, default=5.0)
    ap.add_argument("--in-child", action="store_true")
    ap.add_argument("--worker-nofile", type=int, default=0)
    args = ap.parse_args()
    if not args.in_child:
        print("batches:", run(args))
        return
    healthy = DataLoader(Parts(stacked=True), batch_size=8, num_workers=2)
    consume(healthy, 1)
    child = multiprocessing.get_context("fork").Process(target=in_child, args=(args,))
    child.start()
    child.join()
    consume(healthy, 1)  # the newest notes are the job's own process's, with its own limit
    sys.exit(child.exitcode)


if __name__ == "__main__":
    main()
