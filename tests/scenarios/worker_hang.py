"""worker_hang: __getitem__ waits for something that never comes. The worker sleeps forever;
no batch comes.

`--on event` (default): an Event that is never set (a lost message). `--on pipe`: a read of a
pipe whose writer stays open and never writes (a reader with no data). `--on native`: a C call
that blocks on a pthread mutex the main process held when it forked the worker (a native
library's lock inherited locked through fork): the worker's main thread never comes back to
Python, so its stack comes from the native stack dump, not the safe-point one.
`--after N`: the first N batches come at once, to a loop with no model step (a fast loader,
whose hand-outs dldoctor measures as a sample), and batch N waits: the report names batch N
as the one the loop waits for.
Healthy twin (`--healthy`): the event is set / the pipe is filled / the mutex is free before
the loader starts.

`--ddp` (run it under torchrun with two ranks, DDP over gloo): only rank 1's worker waits for
the event; rank 0's loader is fine, and rank 0 then waits for rank 1 in the all-reduce.
"""

import ctypes
import os
import threading

import torch
from _common import consume, parser
from torch.utils.data import DataLoader, Dataset

SAMPLE_BYTES = 8


class Waits(Dataset):
    def __init__(self, ready, after=0):
        self.ready = ready
        self.after = after  # samples that come at once before the wait

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        if i >= self.after:
            self.ready.wait()
        return torch.full((8,), float(i))

    def __getstate__(self):
        return {"ready": None, "after": self.after}

    def __setstate__(self, state):
        self.ready = _READY
        self.after = state["after"]


class FromPipe(Dataset):
    """Each sample's bytes come from a pipe (forked workers inherit its read end)."""

    def __init__(self, fd):
        self.fd = fd

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        data = os.read(self.fd, SAMPLE_BYTES)
        return torch.full((8,), float(i) + len(data))


class NativeLock(Dataset):
    """Each sample goes through a C call that takes and releases a process-wide mutex."""

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        return torch.full((8,), float(i) + decode_native())


def decode_native():
    _LIBC.pthread_mutex_lock(_MUTEX)  # ctypes lets the GIL go; a signal does not end the wait
    _LIBC.pthread_mutex_unlock(_MUTEX)
    return 0.0


_READY = threading.Event()
_LIBC = ctypes.CDLL(None)
_MUTEX = ctypes.create_string_buffer(64)  # zeroed: a default mutex on glibc


def main():
    ap = parser(__doc__)
    ap.add_argument(
        "--on",
        choices=("event", "pipe", "native"),
        default="event",
        help="what __getitem__ waits for",
    )
    ap.add_argument("--after", type=int, default=0, help="batches that come before the wait")
    ap.add_argument("--ddp", action="store_true", help="a rank of a torchrun job")
    args = ap.parse_args()
    if args.ddp:
        from _ddp import rank, start, train

        if args.healthy or rank() != 1:
            _READY.set()
        start()
        train(DataLoader(Waits(_READY), batch_size=4, num_workers=1), args.seconds, 8)
        return
    if args.on == "native":
        if not args.healthy:
            _LIBC.pthread_mutex_lock(_MUTEX)  # held here for good: forked workers inherit it
        dataset = NativeLock()
    elif args.on == "pipe":
        read_fd, write_fd = os.pipe()  # the write end stays open here: reads block, not EOF
        if args.healthy:
            os.write(write_fd, b"x" * 65536)  # one pipe buffer: thousands of samples
        dataset = FromPipe(read_fd)
    else:
        if args.healthy:
            _READY.set()
        dataset = Waits(_READY, after=4 * args.after)
    loader = DataLoader(dataset, batch_size=4, num_workers=1)
    fast = {"step": None} if args.after else {}  # no model step: batches as fast as they come
    print("batches:", consume(loader, args.seconds, **fast))


if __name__ == "__main__":
    main()
