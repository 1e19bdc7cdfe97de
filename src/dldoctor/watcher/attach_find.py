"""`dldoctor attach`, first layer: find the job from one pid. Reads /proc only (and one
py-spy dump per process to tell which loader a worker fetches for): the job's main processes,
their DataLoader workers, a torchrun agent above them, and each main process's rank.

A worker is a process torch named `pt_data_worker` (torch's _worker_loop names itself so) or
whose stack is in `_worker_loop`; its main process is its parent (under forkserver, the
forkserver's parent). The given pid may be a main process, a worker or an agent.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from ..errors import DldoctorError
from ..ranks import rank_of

WORKER_COMM = "pt_data_worker"  # torch.utils.data._utils.worker._worker_loop names its process
# Exit codes of `dldoctor attach` for a pid it cannot diagnose (README, `attach --help`).
EXIT_NO_PROCESS = 3
EXIT_NOT_PYTHON = 4
EXIT_NO_DATALOADER = 5


class AttachError(DldoctorError):
    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass
class Proc:
    """One process as /proc shows it."""

    pid: int
    ppid: int
    comm: str
    cmdline: list[str]

    @property
    def command(self) -> str:
        """The command line on one line (an argument may hold newlines: `python -c ...`)."""
        return " ".join(" ".join(self.cmdline).split()) if self.cmdline else f"[{self.comm}]"


@dataclass
class Loader:
    """A DataLoader as the tree shows it: its main process and worker pids (worker id i at
    index i, 0 where that worker is not running)."""

    loader: int
    main_pid: int
    worker_pids: list[int] = field(default_factory=list)
    num_workers: int = 0
    start_method: str = ""
    pin_memory: bool = False
    persistent_workers: bool = False
    dataset: str = ""  # the dataset's type, when py-spy could read the worker's locals

    def as_dict(self) -> dict:
        return {
            "loader": self.loader,
            "main_pid": self.main_pid,
            "num_workers": self.num_workers,
            "worker_pids": self.worker_pids,
            "start_method": self.start_method,
            "pin_memory": self.pin_memory,
            "persistent_workers": self.persistent_workers,
        }


@dataclass
class Job:
    """What attaching found: the pid asked for, the agent above the ranks (if any), the main
    processes (with their rank variables) and the loaders."""

    pid: int
    target: Proc
    agent: Proc | None
    mains: dict[int, Proc]
    ranks: dict[int, dict]  # main pid -> {"rank": 0, "local_rank": 0, ...} (read ones only)
    loaders: list[Loader]
    workers: dict[int, Proc]
    # Main processes with no worker process: a num_workers=0 loader is seen only in their
    # stacks, so they are loaders to confirm from the samples.
    unconfirmed: set[int] = field(default_factory=set)

    def processes(self) -> list[int]:
        return list(self.mains) + list(self.workers)


# -- /proc --------------------------------------------------------------------------------------


def _read(path: str, binary: bool = False):
    try:
        with open(path, "rb" if binary else "r") as f:
            return f.read()
    except (OSError, UnicodeDecodeError):
        return None


def read_proc(pid: int) -> Proc | None:
    """The process's parent, name and command line; None when it does not exist."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    # comm is in parentheses and may hold spaces or parentheses itself: split at the last ')'.
    head, _, tail = stat.rpartition(")")
    comm = head.partition("(")[2]
    fields = tail.split()
    ppid = int(fields[1]) if len(fields) > 1 else 0
    raw = _read(f"/proc/{pid}/cmdline", binary=True) or b""
    cmdline = [a.decode(errors="replace") for a in raw.split(b"\0") if a]
    return Proc(pid, ppid, comm, cmdline)


def all_procs() -> dict[int, Proc]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            p = read_proc(int(name))
            if p is not None:
                out[p.pid] = p
    return out


def read_environ(pid: int) -> dict[str, str] | None:
    """The environment the process was started with; None when it cannot be read (another
    user's process without ptrace rights)."""
    raw = _read(f"/proc/{pid}/environ", binary=True)
    if raw is None:
        return None
    env = {}
    for entry in raw.split(b"\0"):
        key, sep, value = entry.partition(b"=")
        if sep:
            env[key.decode(errors="replace")] = value.decode(errors="replace")
    return env


_PY_NAME = re.compile(r"^(python|pypy)[0-9.]*[a-z]?$")


def is_python(p: Proc) -> bool:
    """The process runs a Python interpreter: its executable (or, when that cannot be read,
    its command) is python/pypy, or it maps libpython, or torch renamed it as a worker."""
    if p.comm == WORKER_COMM:
        return True
    exe = None
    try:
        exe = os.readlink(f"/proc/{p.pid}/exe")
    except OSError:
        pass
    names = [os.path.basename(exe)] if exe else []
    if p.cmdline:
        names.append(os.path.basename(p.cmdline[0]))
    if any(_PY_NAME.match(n.removesuffix(" (deleted)")) for n in names):
        return True
    maps = _read(f"/proc/{p.pid}/maps")
    return bool(maps and "libpython" in maps)


def is_worker(p: Proc) -> bool:
    return p.comm == WORKER_COMM


def is_helper(p: Proc) -> bool:
    """multiprocessing's own processes: the resource tracker, the forkserver."""
    cmd = p.command
    return "resource_tracker" in cmd or "forkserver import main" in cmd


def is_forkserver(p: Proc) -> bool:
    return "forkserver import main" in p.command


def is_agent(p: Proc) -> bool:
    """torchrun / torch.distributed.run / launch: the elastic agent above the ranks."""
    cmd = p.command
    return (
        "torch.distributed.run" in cmd
        or "torch.distributed.launch" in cmd
        or any(os.path.basename(a) == "torchrun" for a in p.cmdline[:2])
    )


def descendants(root: int, procs: dict[int, Proc]) -> list[int]:
    children: dict[int, list[int]] = {}
    for p in procs.values():
        children.setdefault(p.ppid, []).append(p.pid)
    out, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        out.append(pid)
        todo.extend(sorted(children.get(pid, ())))
    return out


def main_of(worker: Proc, procs: dict[int, Proc]) -> int:
    parent = procs.get(worker.ppid)
    if parent is not None and is_forkserver(parent):
        return parent.ppid
    return worker.ppid


def start_method_of(worker: Proc, procs: dict[int, Proc]) -> str:
    parent = procs.get(worker.ppid)
    if parent is not None and is_forkserver(parent):
        return "forkserver"
    if "multiprocessing.spawn" in worker.command or "spawn_main" in worker.command:
        return "spawn"
    return "fork"


# -- the job --------------------------------------------------------------------------------


def find_job(pid: int, dump=None) -> Job:
    """The job `pid` belongs to. `dump(pid, with_locals)` returns py-spy's JSON threads of a
    process or None (no permission, not Python): a worker's locals tell which loader it
    fetches for. (A pin-memory thread is seen in the main process's samples later.)"""
    procs = all_procs()
    target = procs.get(pid) or read_proc(pid)
    if target is None:
        raise AttachError(f"no process with pid {pid}", EXIT_NO_PROCESS)
    procs[pid] = target
    if not is_python(target):
        raise AttachError(
            f"pid {pid} ({target.command[:80]}) is not a Python process: attach to the "
            "training script's process, a DataLoader worker or the torchrun agent",
            EXIT_NOT_PYTHON,
        )
    # A worker (or a forkserver) stands for its main process.
    root = target
    while (is_worker(root) or is_forkserver(root)) and root.ppid in procs:
        root = procs[root.ppid]
    tree = descendants(root.pid, procs)
    workers = {p: procs[p] for p in tree if p in procs and is_worker(procs[p])}
    agent = root if is_agent(root) else None
    mains_with_workers = sorted({main_of(w, procs) for w in workers.values()})
    mains = {m: procs[m] for m in mains_with_workers if m in procs}
    # A Python process with no worker may still run a loader in-process (num_workers=0): the
    # ranks under an agent, else the process asked for. Its samples confirm it or drop it.
    if agent is not None:
        candidates = [p for p in tree if p in procs and procs[p].ppid == agent.pid]
    else:
        candidates = [root.pid]
    unconfirmed: set[int] = set()
    for c in candidates:
        proc = procs[c]
        if c not in mains and not is_helper(proc) and is_python(proc):
            mains[c] = proc
            unconfirmed.add(c)
    ranks = {m: rank_of(read_environ(m)) for m in mains}
    loaders = _loaders(mains, workers, procs, dump)
    return Job(pid, target, agent, mains, ranks, loaders, workers, unconfirmed)


def _frames_of(threads) -> list[list[dict]]:
    return [t.get("frames") or [] for t in threads or []]


def _locals_of(threads, function: str) -> dict[str, str]:
    for frames in _frames_of(threads):
        for f in frames:
            if str(f.get("name", "")).endswith(function):
                return {v.get("name"): str(v.get("repr")) for v in f.get("locals") or []}
    return {}


_ADDR = re.compile(r" at 0x[0-9a-f]+")


def _loaders(mains, workers, procs, dump) -> list[Loader]:
    """Groups each main process's workers into loaders. With the workers' locals (py-spy
    --locals): the iterator a forked worker was started by, else the dataset's type and
    num_workers, and the worker id; without them, one loader per main process."""
    loaders: list[Loader] = []
    for main in sorted(mains):
        mine = sorted(w for w, p in workers.items() if main_of(p, procs) == main)
        groups: dict[tuple, list[tuple[int, int, dict]]] = {}
        for w in mine:
            threads = dump(w, True) if dump else None
            loop = _locals_of(threads, "_worker_loop")
            init = _locals_of(threads, "_MultiProcessingDataLoaderIter.__init__")
            wid = int(loop["worker_id"]) if loop.get("worker_id", "").isdigit() else -1
            n = int(loop["num_workers"]) if loop.get("num_workers", "").isdigit() else 0
            it = init.get("self", "")
            dataset = _ADDR.sub("", loop.get("dataset", "")).strip("<>")
            key = ("iter", it) if it else ("kind", n, dataset)
            groups.setdefault(key, []).append((w, wid, loop))
        for members in groups.values() or [[]]:
            ids = [wid for _, wid, _ in members]
            if members and (min(ids) < 0 or len(set(ids)) != len(ids)):
                members = [(w, i, loop) for i, (w, _, loop) in enumerate(members)]  # unknown ids
            told = [
                int(m[2]["num_workers"]) for m in members if m[2].get("num_workers", "").isdigit()
            ]
            size = max([len(members), *told])
            pids = [0] * size
            for w, wid, _ in members:
                pids[wid] = w
            loop = members[0][2] if members else {}
            first = procs.get(members[0][0]) if members else None
            loaders.append(
                Loader(
                    loader=len(loaders),
                    main_pid=main,
                    worker_pids=pids,
                    num_workers=size,
                    start_method=start_method_of(first, procs) if first else "",
                    persistent_workers=loop.get("persistent_workers") == "True",
                    dataset=_ADDR.sub("", loop.get("dataset", "")).strip("<>"),
                )
            )
    return loaders
