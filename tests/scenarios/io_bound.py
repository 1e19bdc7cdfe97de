"""io_bound (field guide cause 4): __getitem__ waits off-CPU for the bytes of each sample.

`--source socket` (default): each sample is read from a local TCP server that answers after
a delay, as a remote store would. `--source disk`: the reads go to a block device held to a
few MB/s by a blkio cgroup throttle (v1), with the files evicted from the page cache, so each
read waits on the device; exits 77 with the reason when the kernel or the sandbox refuses
(not root, no blkio controller, no block device behind the folder). `--read mmap`: the same
files mapped and copied out of the mapping, as np.load(mmap_mode="r") or a memory-mapped Arrow
table reads them: the worker waits in page faults, never in read().
Healthy twin (`--healthy`): the server answers at once / no throttle, files kept in the page
cache.
"""

import mmap
import os
import shutil
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

import torch
from _common import consume, parser
from torch.utils.data import DataLoader, Dataset

# -- socket: a slow remote store ------------------------------------------------------------

DELAY_S = 0.03
PAYLOAD = 4096


class Handler(socketserver.BaseRequestHandler):
    delay = DELAY_S

    def handle(self):
        while self.request.recv(16):
            time.sleep(self.delay)
            self.request.sendall(b"x" * PAYLOAD)


class Remote(Dataset):
    def __init__(self, port):
        self.port = port
        self.conn = None

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        if self.conn is None:  # one connection per worker process
            self.conn = socket.create_connection(("127.0.0.1", self.port))
        self.conn.sendall(b"get\n")
        got = b""
        while len(got) < PAYLOAD:
            got += self.conn.recv(PAYLOAD - len(got))
        return torch.frombuffer(bytearray(got), dtype=torch.uint8).float()

    def __getstate__(self):
        return {"port": self.port, "conn": None}


def from_socket(args):
    Handler.delay = 0.0 if args.healthy else DELAY_S
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    loader = DataLoader(Remote(server.server_address[1]), batch_size=4, num_workers=1)
    print("batches:", consume(loader, args.seconds))
    server.shutdown()


# -- disk: a throttled block device ---------------------------------------------------------

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


def evict(path):
    """Drops the file's pages from the page cache: its next read goes to the device."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


class Files(Dataset):
    def __init__(self, paths, evict_after_read, mapped=False):
        self.paths, self.evict_after_read, self.mapped = paths, evict_after_read, mapped

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        path = self.paths[i % len(self.paths)]
        with open(path, "rb") as f:
            if self.mapped:  # page faults instead of read(): as np.load(mmap_mode="r") reads
                with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                    data = m[:]
            else:
                data = f.read()
        if self.evict_after_read:  # the next epoch reads from the device again
            evict(path)
        return torch.frombuffer(bytearray(data[:1024]), dtype=torch.uint8).float()


def from_disk(args):
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
            os.sync()
            for p in paths:
                evict(p)
        files = Files(paths, not args.healthy, args.read == "mmap")
        loader = DataLoader(files, batch_size=2, num_workers=1)
        print("batches:", consume(loader, args.seconds))
    finally:
        if cg:
            leave_cgroup(cg)
        shutil.rmtree(folder, ignore_errors=True)


def main():
    ap = parser(__doc__)
    ap.add_argument(
        "--source",
        choices=("socket", "disk"),
        default="socket",
        help="where the samples are read from",
    )
    ap.add_argument(
        "--read",
        choices=("read", "mmap"),
        default="read",
        help="--source disk: read() each file, or map it and copy its pages",
    )
    args = ap.parse_args()
    if args.source == "disk":
        from_disk(args)
    else:
        from_socket(args)


if __name__ == "__main__":
    main()
