"""Field guide cause 4, storage flavour: the dataset's reads go to a slow block device.

The job puts itself in a blkio cgroup (v1; v2 io.max where v1 is absent) that holds reads
from the data's device to a few MB/s, and evicts its files from the page cache, so each
__getitem__ waits on the device. Exits 77 with the reason when the kernel or the sandbox
refuses (not root, no blkio controller, no block device behind the folder).
Healthy twin (`--healthy`): no throttle, files kept in the page cache.
"""

import os
import shutil
import subprocess
import sys
import tempfile

import torch
from _common import consume, parser
from torch.utils.data import DataLoader, Dataset

FILE_BYTES = 256 * 1024
FILES = 160
RATE_BPS = 4 * 1024 * 1024  # 4 MB/s: ~60 ms per 256 KiB sample


def skip(reason):
    print(f"skip: {reason}")
    sys.exit(77)


def device_of(path):
    try:
        src = subprocess.run(
            ["findmnt", "-no", "MAJ:MIN", "--target", path], capture_output=True, text=True
        ).stdout.strip()
    except OSError:
        return None
    return src or None


def own_cgroup(controller):
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, ctrls, path = line.rstrip("\n").split(":", 2)
            if controller in ctrls.split(","):
                return path
    return None


def throttle_self(folder):
    """Moves this process into a child blkio cgroup limited to RATE_BPS reads; returns its dir."""
    if os.geteuid() != 0:
        skip("needs root for cgroups")
    majmin = device_of(folder)
    if not majmin or majmin.startswith("0:"):
        skip(f"no block device behind {folder} ({majmin})")
    # A partition's throttle must name the whole disk on some kernels: use the disk's numbers.
    disk = os.path.realpath(f"/sys/dev/block/{majmin}")
    if os.path.exists(os.path.join(disk, "partition")):
        with open(os.path.join(os.path.dirname(disk), "dev")) as f:
            majmin = f.read().strip()
    cur = own_cgroup("blkio")
    base = "/sys/fs/cgroup/blkio"
    if cur is None or not os.path.isdir(base):
        skip("no cgroup v1 blkio controller")
    cg = os.path.join(base + cur, f"dldoctor-io-{os.getpid()}")
    try:
        os.mkdir(cg)
        with open(os.path.join(cg, "blkio.throttle.read_bps_device"), "w") as f:
            f.write(f"{majmin} {RATE_BPS}")
        with open(os.path.join(cg, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
    except OSError as e:
        skip(f"blkio throttle refused: {e}")
    return cg


def leave_cgroup(cg):
    parent = os.path.dirname(cg)
    try:
        with open(os.path.join(parent, "cgroup.procs"), "w") as f:
            f.write(str(os.getpid()))
        os.rmdir(cg)
    except OSError:
        pass


def evict(paths):
    os.sync()
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


class Files(Dataset):
    def __init__(self, paths, evict_after_read):
        self.paths, self.evict_after_read = paths, evict_after_read

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        path = self.paths[i % len(self.paths)]
        with open(path, "rb") as f:
            data = f.read()
        if self.evict_after_read:  # the next epoch reads from the device again
            fd = os.open(path, os.O_RDONLY)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)
        return torch.frombuffer(bytearray(data[:1024]), dtype=torch.uint8).float()


def main():
    args = parser(__doc__).parse_args()
    folder = tempfile.mkdtemp(prefix="scenario-io-", dir="/var/tmp")
    cg = None
    try:
        paths = []
        for i in range(FILES):
            p = os.path.join(folder, f"{i}.bin")
            with open(p, "wb") as f:
                f.write(os.urandom(FILE_BYTES))
            paths.append(p)
        if not args.healthy:
            cg = throttle_self(folder)
            evict(paths)
        loader = DataLoader(Files(paths, not args.healthy), batch_size=2, num_workers=1)
        print("batches:", consume(loader, args.seconds))
    finally:
        if cg:
            leave_cgroup(cg)
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
