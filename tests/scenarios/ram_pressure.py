"""ram_pressure: the job runs close to its memory limit, without pin_memory being the cause.

The training process keeps a large table in memory (features loaded once, a replay buffer):
once its loader's worker runs, it grows the table until the memory its cgroup holds (less
the inactive page cache, which the kernel reclaims first) is 94% of the cgroup's limit, and
trains on. Nothing is killed yet, but the next worker to grow meets the OOM killer and the
page cache the dataset reads from is being reclaimed.

The job moves itself into the memory cgroup given with `--cgroup DIR` (made by the test, e.g.
a child of the current one with memory.limit_in_bytes 256 MiB) before it starts the loader,
so the watcher outside is not limited; without `--cgroup` it uses the memory cgroup it is
in, and exits 77 when that has no limit.
Healthy twin (`--healthy`): the same job, the table fills half the limit.
"""

from __future__ import annotations

import os
import sys
import time

from _common import Numbers, consume, join_cgroup, parser
from torch.utils.data import DataLoader

MIB = 1 << 20
FULL = 0.94  # of the limit: under the 10% of headroom that makes memory short
HALF = 0.50  # the twin: room to spare
CHUNK = 4 * MIB


def own_memory_cgroup() -> str | None:
    """The directory of this process's memory cgroup (v1 memory controller, else v2)."""
    with open("/proc/self/cgroup") as f:
        lines = [ln.rstrip("\n").split(":", 2) for ln in f if ln.count(":") >= 2]
    for _, ctrls, path in lines:
        if "memory" in ctrls.split(","):
            return "/sys/fs/cgroup/memory" + path
    for hid, _, path in lines:
        if hid == "0":
            return "/sys/fs/cgroup" + path
    return None


def read(cg: str, *names: str) -> str | None:
    for name in names:
        try:
            with open(os.path.join(cg, name)) as f:
                return f.read()
        except OSError:
            pass
    return None


def limit_of(cg: str) -> int | None:
    text = (read(cg, "memory.limit_in_bytes", "memory.max") or "").strip()
    if not text.isdigit() or int(text) >= 1 << 60:  # "max", or v1's "unlimited" page count
        return None
    return int(text)


def held_by(cg: str) -> int:
    """What the cgroup holds that the kernel cannot simply drop: usage less inactive files."""
    usage = int(read(cg, "memory.usage_in_bytes", "memory.current") or 0)
    for line in (read(cg, "memory.stat") or "").splitlines():
        key, _, value = line.partition(" ")
        if key in ("total_inactive_file", "inactive_file"):
            usage -= int(value)
            break
    return max(0, usage)


def main():
    ap = parser(__doc__)
    ap.add_argument("--cgroup", help="memory cgroup directory to join before the loader starts")
    args = ap.parse_args()
    if args.cgroup:
        join_cgroup(args.cgroup)
    cg = args.cgroup or own_memory_cgroup()
    limit = limit_of(cg) if cg else None
    if limit is None:
        print(f"skip: no memory limit on this job's cgroup ({cg}); pass --cgroup DIR")
        sys.exit(77)
    share = HALF if args.healthy else FULL
    table = []

    def step(_batch):
        # Grown once the worker runs, so what it holds is already counted.
        while not table or held_by(cg) + CHUNK <= share * limit:
            table.append(bytearray(b"\x01") * CHUNK)  # touched: really resident
        time.sleep(0.02)

    loader = DataLoader(Numbers(64), batch_size=16, num_workers=1)
    print("batches:", consume(loader, args.seconds, step))
    print(f"held {held_by(cg) / MIB:.0f} of {limit / MIB:.0f} MiB", file=sys.stderr)


if __name__ == "__main__":
    main()
