"""Real faults for tests (see /work/shared/FAULTS.md): few CPUs, a small /dev/shm, hidden /proc
files, a cgroup CPU quota or memory limit, a low fd limit. Each helper makes the fault with
the kernel's own tools and calls pytest.skip, with the reason, where it is not permitted.

    proc = run(taskset_cmd([0], cmd))                 # pinned to CPU 0
    proc = run_in_small_shm(cmd, mib=16)              # /dev/shm is a 16 MiB tmpfs
    proc = run(namespace_cmd(cmd, hide=["/proc/meminfo"]))   # an unreadable /proc source
    with cpu_quota_cgroup(0.5) as cg:                 # 0.5 CPU for what runs inside
        proc = cg.run(cmd)                            # or Popen(cmd, preexec_fn=cg.enter)
    with memory_limit_cgroup(256 << 20) as cg: ...
    proc = run(nofile_limit_cmd(cmd, 256))            # RLIMIT_NOFILE 256
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator, Sequence

import pytest

CFS_PERIOD_US = 100_000  # the kernel's default period; the quota is a share of it


def skip_unless_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root")


def require_tool(name: str) -> str:
    path = shutil.which(name)
    if not path:
        pytest.skip(f"{name} is not installed")
    return path


def run(cmd: Sequence[str], timeout: float = 60, **kw) -> subprocess.CompletedProcess:
    """subprocess.run with text output captured, the way the helpers' commands are run."""
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run(list(cmd), timeout=timeout, **kw)


# --- CPUs --------------------------------------------------------------------------------------


def taskset_cmd(cpus: Iterable[int], cmd: Sequence[str]) -> list[str]:
    """`cmd` pinned to `cpus` (taskset -c)."""
    cpus = sorted(set(cpus))
    missing = set(cpus) - os.sched_getaffinity(0)
    if missing:
        pytest.skip(f"CPUs {sorted(missing)} are not in this process's affinity")
    return [require_tool("taskset"), "-c", ",".join(map(str, cpus)), *cmd]


# --- mount namespace: small /dev/shm, hidden /proc files ---------------------------------------


@functools.cache
def _unshare_refusal() -> str:
    """'' when `unshare -rm` can mount a tmpfs here, else why not."""
    if not shutil.which("unshare"):
        return "unshare is not installed"
    probe = ["unshare", "-rm", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /mnt"]
    try:
        r = subprocess.run(probe, capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unshare failed: {e}"
    if r.returncode != 0:
        return f"unshare -rm with a tmpfs mount is not permitted: {r.stderr.strip()}"
    return ""


def namespace_cmd(
    cmd: Sequence[str], shm_mib: int | None = None, hide: Iterable[str] = ()
) -> list[str]:
    """`cmd` in a new user + mount namespace (`unshare -rm`, so no real root is needed) where
    /dev/shm is a tmpfs of `shm_mib` MiB when given, and each path in `hide` reads as empty:
    an empty file is bound over a file, an empty tmpfs over a directory."""
    reason = _unshare_refusal()
    if reason:
        pytest.skip(reason)
    script = ["set -e"]
    if shm_mib is not None:
        script.append(f"mount -t tmpfs -o size={int(shm_mib)}m tmpfs /dev/shm")
    for path in hide:
        q = _sh_quote(path)
        script.append(
            f"if [ -d {q} ]; then mount -t tmpfs -o size=4k tmpfs {q}; "
            f'else e=$(mktemp); mount --bind "$e" {q}; rm -f "$e"; fi'
        )
    script.append('exec "$@"')
    return ["unshare", "-rm", "sh", "-c", "; ".join(script), "sh", *cmd]


def run_in_small_shm(cmd: Sequence[str], mib: int, **kw) -> subprocess.CompletedProcess:
    """Runs `cmd` with /dev/shm a tmpfs of `mib` MiB (in its own mount namespace)."""
    return run(namespace_cmd(cmd, shm_mib=mib), **kw)


def _sh_quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"


# --- limits ------------------------------------------------------------------------------------


def nofile_limit_cmd(cmd: Sequence[str], n: int) -> list[str]:
    """`cmd` with RLIMIT_NOFILE n:n (prlimit)."""
    return [require_tool("prlimit"), f"--nofile={n}:{n}", *cmd]


# --- cgroups -----------------------------------------------------------------------------------


class Cgroup:
    """A child cgroup made for a test; put processes in with add(pid), enter (as Popen's
    preexec_fn) or run(cmd)."""

    def __init__(self, path: str, version: int):
        self.path = path
        self.version = version

    def add(self, pid: int) -> None:
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def enter(self) -> None:
        """Moves the calling process in; pass as preexec_fn so a command starts inside."""
        self.add(os.getpid())

    def run(self, cmd: Sequence[str], **kw) -> subprocess.CompletedProcess:
        return run(cmd, preexec_fn=self.enter, **kw)

    def read(self, name: str) -> str:
        with open(os.path.join(self.path, name)) as f:
            return f.read()


def _own_cgroup_dir(controller: str) -> tuple[str, int]:
    """(directory of this process's cgroup for `controller`, 1 or 2); skips when none."""
    with open("/proc/self/cgroup") as f:
        lines = [ln.rstrip("\n").split(":", 2) for ln in f if ln.count(":") >= 2]
    with open("/proc/self/mountinfo") as f:
        mounts = [ln.split() for ln in f]

    def mount_of(fstype: str, want: str | None) -> tuple[str, str] | None:
        for m in mounts:
            dash = m.index("-")
            if m[dash + 1] != fstype:
                continue
            if want and want not in m[dash + 3].split(","):
                continue
            return m[3], m[4].replace("\\040", " ")  # (root, mount point)
        return None

    for _, ctrls, path in lines:
        if controller in ctrls.split(","):
            found = mount_of("cgroup", controller)
            if found:
                root, point = found
                rel = path[len(root) :] if root != "/" and path.startswith(root) else path
                return os.path.join(point, rel.lstrip("/")), 1
    for hid, ctrls, path in lines:
        if hid == "0" and ctrls == "":
            found = mount_of("cgroup2", None)
            if found:
                d = os.path.join(found[1], path.lstrip("/"))
                try:
                    with open(os.path.join(d, "cgroup.controllers")) as f:
                        available = f.read().split()
                except OSError:
                    available = []
                if controller in available:
                    return d, 2
    pytest.skip(f"no {controller} cgroup controller (v1 or v2) available to this process")


@contextlib.contextmanager
def child_cgroup(controller: str, settings: dict[str, dict[str, str]]) -> Iterator[Cgroup]:
    """A new cgroup inside this process's own `controller` cgroup (never beside it), with
    `settings[version]` written into it ({1: {file: value}, 2: {file: value}}); removed after,
    its processes moved back to the parent first."""
    skip_unless_root()
    parent, version = _own_cgroup_dir(controller)
    path = os.path.join(parent, f"dldoctor-test-{os.getpid()}-{time.monotonic_ns()}")
    try:
        os.mkdir(path)
    except OSError as e:
        pytest.skip(f"cannot create a cgroup under {parent}: {e.strerror}")
    cg = Cgroup(path, version)
    try:
        if version == 2:
            _enable_v2_controller(parent, controller, cleanup=path)
        for name, value in settings[version].items():
            try:
                with open(os.path.join(path, name), "w") as f:
                    f.write(value)
            except OSError as e:
                pytest.skip(f"cannot set {name} in {path}: {e.strerror}")
        yield cg
    finally:
        _remove_cgroup(path, parent)


def _enable_v2_controller(parent: str, controller: str, cleanup: str) -> None:
    try:
        with open(os.path.join(parent, "cgroup.subtree_control")) as f:
            if controller in f.read().split():
                return
        with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
            f.write(f"+{controller}")
    except OSError as e:
        # v2 allows controllers only in cgroups without processes of their own.
        pytest.skip(f"cannot enable the {controller} controller under {parent}: {e.strerror}")


def _remove_cgroup(path: str, parent: str) -> None:
    for _ in range(50):
        try:
            with open(os.path.join(path, "cgroup.procs")) as f:
                pids = f.read().split()
            for pid in pids:
                with contextlib.suppress(OSError):
                    with open(os.path.join(parent, "cgroup.procs"), "w") as f:
                        f.write(pid)
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.05)  # exiting processes leave the cgroup a moment later


def cpu_quota_cgroup(cpus: float):
    """A cgroup whose CPU quota is `cpus` CPUs (v1 cfs_quota_us/cfs_period_us, v2 cpu.max)."""
    quota = str(int(round(cpus * CFS_PERIOD_US)))
    return child_cgroup(
        "cpu",
        {
            1: {"cpu.cfs_period_us": str(CFS_PERIOD_US), "cpu.cfs_quota_us": quota},
            2: {"cpu.max": f"{quota} {CFS_PERIOD_US}"},
        },
    )


def memory_limit_cgroup(limit_bytes: int):
    """A cgroup whose memory limit is `limit_bytes` (v1 memory.limit_in_bytes, v2 memory.max);
    the OOM killer acts inside it when exceeded."""
    n = str(int(limit_bytes))
    return child_cgroup("memory", {1: {"memory.limit_in_bytes": n}, 2: {"memory.max": n}})
