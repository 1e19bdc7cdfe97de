"""The checks of `dldoctor check`: machine facts in, a list of verdicts out (OK / WARN / FAIL /
UNKNOWN), each with the measured number and, where not OK, the concrete fix.

Pure functions of the facts dict (`_facts.collect`), so `dldoctor run` can reuse them and
tests can feed facts read with a source missing. Thresholds are named, with the reason; those
the analyzer's rules use as well are the C++ core's own (`_ext`), as is the /dev/shm fix.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass

from .. import _ext

OK, WARN, FAIL, UNKNOWN = "ok", "warn", "fail", "unknown"

# Shared with the analyzer's rules, defined once in C++ (the reason beside each there):
# the cores each rank's main process keeps (it unpickles every batch and drives the model),
MAIN_PROCESS_CORES = _ext.MAIN_PROCESS_CORES
# torch's DataLoader default (each worker keeps this many batches in flight),
DEFAULT_PREFETCH_FACTOR = _ext.DEFAULT_PREFETCH_FACTOR
# /dev/shm holds this many times the batches in flight (batch sizes vary, the batch in
# training, NCCL's own segments),
SHM_MARGIN = _ext.SHM_MARGIN
# below this share of memory available the kernel reclaims the dataset's page cache,
RAM_LOW_FRACTION = _ext.RAM_LOW_FRACTION
# the open-file limit a loader passing many tensors per batch needs (64 x 3 x 4 x 2 = 1536
# fds under the file_descriptor strategy, beside the dataset's own files),
NOFILE_WARN_BELOW = _ext.NOFILE_WARN_BELOW
# and a dataset under this share of RAM stays in the page cache after the first epoch.
CACHE_FIT_FRACTION = _ext.CACHE_FIT_FRACTION
# The batch assumed when --batch-bytes is not given: 64 RGB images of 224x224 as float32, the
# common ImageNet recipe (36.75 MiB).
DEFAULT_BATCH_BYTES = 64 * 3 * 224 * 224 * 4
# A cgroup at 90% of its limit is one worker's copy-on-write growth away from the OOM killer,
# which kills a worker ("DataLoader worker ... is killed by signal: Killed").
CGROUP_MEMORY_HIGH_FRACTION = 0.90
# A few hundred MiB swapped out is enough for a step to stall seconds while pages fault back.
SWAP_IN_USE_WARN_BYTES = 256 << 20
# More than half the fd limit already open leaves little for the batches in flight.
OPEN_FDS_WARN_FRACTION = 0.5
# PSI "some" avg10: the share of the last 10 s in which a task waited for the resource. Above
# a fifth, something else on the machine is competing now, and loader speed will vary with it.
PRESSURE_WARN_PCT = 20.0
# When the CPU is contended, the check names who uses it: the processes' CPU over this window
# (long enough for a 100 Hz tick count to resolve a few percent, short enough for a check),
TOP_CPU_WINDOW_S = 1.0
# the few busiest (the competitor is nearly always among them: a build, another job),
TOP_CPU_COUNT = 5
# and none under a twentieth of a CPU, which competes with nothing.
TOP_CPU_MIN_PCT = 5.0
# A GPU with under a tenth of its memory free is held by another process.
GPU_FREE_WARN_FRACTION = 0.10
# One GPU training a ResNet-50 on ImageNet JPEGs reads ~110 KB x ~2,500 images/s = 275 MB/s;
# below 100 MB/s, storage caps most single-GPU image jobs unless the data stays in page cache.
STORAGE_SLOW_MB_S = 100.0
# No spinning disk reads faster than this sequentially: a faster "rotational" disk is virtual.
ROTATIONAL_MAX_MB_S = 300.0

GIB = 1 << 30
MIB = 1 << 20


@dataclass
class Check:
    id: str
    status: str
    value: float | int | str | None
    unit: str
    message: str
    fix: str = ""

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class Assumptions:
    """The figures the checks size things from, and whether the user gave them."""

    ranks: int
    batch_bytes: int
    batch_bytes_given: bool
    num_workers: int
    num_workers_given: bool
    prefetch_factor: int = DEFAULT_PREFETCH_FACTOR

    @property
    def in_flight_bytes(self) -> int:
        """Bytes of batches in /dev/shm at once on this node: every rank's workers, each with
        prefetch_factor batches outstanding."""
        return self.ranks * self.num_workers * self.prefetch_factor * self.batch_bytes

    def to_dict(self) -> dict:
        d = asdict(self)
        d["in_flight_bytes"] = self.in_flight_bytes
        return d


_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kKmMgGtT]?)(i?)([bB]?)\s*$")


def parse_size(text: str) -> int:
    """'64M' -> 64e6, '64Mi' / '64MiB' -> 64 x 2^20, '1.5G', '4096'. K/M/G/T are powers of
    1000 and Ki/Mi/Gi/Ti powers of 1024, as in Kubernetes. Raises ValueError."""
    m = _SIZE.match(text)
    if not m:
        raise ValueError(f"not a size: {text!r} (use e.g. 512Mi, 64M, 2G, 1048576)")
    number, prefix, binary, _ = m.groups()
    power = " KMGT".index(prefix.upper()) if prefix else 0
    if binary and not prefix:
        raise ValueError(f"not a size: {text!r}")
    return int(float(number) * (1024 if binary else 1000) ** power)


def human_bytes(n: float | None) -> str:
    if n is None:
        return "unknown"
    for unit, size in (("TiB", 1 << 40), ("GiB", GIB), ("MiB", MIB), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def workers_per_rank(usable: float, ranks: int) -> int:
    """The largest sensible num_workers for each rank's loader: the usable cores less one per
    rank for its main process, shared out evenly; at least 1."""
    return max(1, (math.floor(usable) - ranks * MAIN_PROCESS_CORES) // ranks)


def _get(facts: dict, group: str, key: str):
    return (facts.get(group) or {}).get(key)


# --- CPU ---------------------------------------------------------------------------------------


def check_cpus(facts: dict) -> Check:
    usable = _get(facts, "cpu", "usable")
    if usable is None:
        return Check("cpu_usable", UNKNOWN, None, "CPUs", "usable CPUs could not be read")
    online = _get(facts, "cpu", "online")
    affinity = _get(facts, "cpu", "affinity")
    quota = _get(facts, "cpu", "cgroup_quota")
    physical = _get(facts, "cpu", "physical_cores")
    parts = [f"{_num(usable)} usable"]
    parts.append(f"affinity {affinity if affinity is not None else 'unknown'}")
    if quota is not None:
        parts.append(f"cgroup quota {_num(quota)} ({_get(facts, 'cpu', 'quota_source')})")
    elif facts.get("cgroup_version"):
        parts.append("no cgroup CPU quota")
    else:
        parts.append("cgroup CPU quota unknown (/proc/self/cgroup unreadable)")
    if physical is not None:
        parts.append(f"{physical} physical cores")
    parts.append(f"os.cpu_count() {online if online is not None else 'unknown'}")
    message = ", ".join(parts)
    if online is not None and usable < online:
        return Check(
            "cpu_usable",
            WARN,
            usable,
            "CPUs",
            message + f": code sizing workers from os.cpu_count() starts {online} where "
            f"{_num(usable)} can run",
            f"size num_workers from the usable CPUs, not os.cpu_count(): in Python, "
            f"len(os.sched_getaffinity(0)) gives the affinity ({affinity}); the cgroup quota "
            f"({_num(quota) if quota is not None else 'none'}) caps it further.",
        )
    return Check("cpu_usable", OK, usable, "CPUs", message)


def check_workers(facts: dict, a: Assumptions) -> Check:
    usable = _get(facts, "cpu", "usable")
    if usable is None:
        return Check("num_workers", UNKNOWN, None, "workers", "usable CPUs unknown")
    per_rank = workers_per_rank(usable, a.ranks)
    ranks = f"{a.ranks} local rank{'s' if a.ranks > 1 else ''}"
    message = (
        f"at most num_workers={per_rank} per loader with {ranks} "
        f"({_num(usable)} usable CPUs, {MAIN_PROCESS_CORES} kept per rank for its main process); "
        "for CPU-bound loading (decode, augment) - I/O-bound loading can use more. "
        f"This rests on an assumption: each main process busy on {MAIN_PROCESS_CORES} whole "
        "core (check has no job to measure); one that mostly waits (on a GPU, on its loader) "
        "leaves most of it to workers: `dldoctor run` measures it and prescribes from that"
    )
    needed = a.ranks * (per_rank + MAIN_PROCESS_CORES)
    if math.floor(usable) < needed:
        return Check(
            "num_workers",
            WARN,
            per_rank,
            "workers",
            message + f"; even that oversubscribes: {a.ranks} x ({per_rank} worker + 1 main) "
            f"> {_num(usable)} CPUs",
            "use num_workers=0 (load in the main process) when loading is light, or give the "
            "job more CPUs (docker run --cpus, Kubernetes resources.limits.cpu, fewer ranks "
            "per node)",
        )
    if a.num_workers_given and a.num_workers > per_rank:
        return Check(
            "num_workers",
            WARN,
            per_rank,
            "workers",
            message + f"; --num-workers {a.num_workers} is more",
            f"use num_workers={per_rank} for CPU-bound loading",
        )
    return Check("num_workers", OK, per_rank, "workers", message)


# --- /dev/shm ----------------------------------------------------------------------------------


def _shm_fix(facts: dict, in_flight: int) -> str:
    """The analyzer's own fix for /dev/shm (shm_exhausted words it the same way): the size in
    whole GiB, the commands for the machine's kind first, then fewer batches in flight."""
    return _ext.shm_fix(_get(facts, "container", "kind") or "", in_flight)


def check_shm(facts: dict, a: Assumptions) -> Check:
    total = _get(facts, "shm", "total_bytes")
    free = _get(facts, "shm", "free_bytes")
    path = _get(facts, "shm", "path") or "/dev/shm"
    if free is None:
        return Check(
            "shm_size",
            UNKNOWN,
            None,
            "bytes",
            f"{path} could not be read (statvfs failed): workers pass batches through it, so a "
            "missing /dev/shm fails every multi-worker loader",
            _shm_fix(facts, a.in_flight_bytes),
        )
    need = a.in_flight_bytes
    batch = human_bytes(a.batch_bytes) + (
        "" if a.batch_bytes_given else " (assumed: 64x3x224x224 float32; pass --batch-bytes)"
    )
    workers = f"{a.num_workers} worker{'s' if a.num_workers != 1 else ''}" + (
        "" if a.num_workers_given else " (the suggested num_workers)"
    )
    ranks = f"{a.ranks} rank{'s' if a.ranks != 1 else ''} x " if a.ranks != 1 else ""
    in_flight = (
        f"{human_bytes(need)} in flight = {ranks}{workers} x prefetch_factor "
        f"{a.prefetch_factor} x {batch}"
    )
    message = f"{human_bytes(free)} free of {human_bytes(total)} ({_get(facts, 'shm', 'fs_type') or 'fs unknown'}); {in_flight}"
    if need > free:
        return Check(
            "shm_size",
            FAIL,
            free,
            "bytes",
            message + ': workers will die with SIGBUS ("DataLoader worker ... killed by signal: '
            'Bus error") or "No space left on device"',
            _shm_fix(facts, need),
        )
    if need * SHM_MARGIN > free:
        return Check(
            "shm_size",
            WARN,
            free,
            "bytes",
            message + f": less than {SHM_MARGIN:g}x margin for bigger batches, the batch in "
            "training and other users of /dev/shm (NCCL)",
            _shm_fix(facts, need),
        )
    return Check("shm_size", OK, free, "bytes", message)


# --- memory ------------------------------------------------------------------------------------


def effective_memory(facts: dict) -> tuple[int | None, int | None]:
    """(total, available) memory for this process: the machine's, capped by the cgroup limit."""
    total = _get(facts, "memory", "total_bytes")
    available = _get(facts, "memory", "available_bytes")
    limit = _get(facts, "memory", "cgroup_limit_bytes")
    if limit is not None:
        used = _get(facts, "memory", "cgroup_working_set_bytes")
        if used is None:
            used = _get(facts, "memory", "cgroup_usage_bytes")
        headroom = limit - used if used is not None else None
        total = min(total, limit) if total is not None else limit
        if headroom is not None:
            available = min(available, headroom) if available is not None else headroom
    return total, available


def check_ram(facts: dict, a: Assumptions) -> Check:
    total, available = effective_memory(facts)
    if total is None or available is None:
        return Check(
            "ram",
            UNKNOWN,
            None,
            "bytes",
            "available memory could not be read (/proc/meminfo missing or without MemAvailable)",
        )
    limited = _get(facts, "memory", "cgroup_limit_bytes") is not None
    scope = " (within the cgroup limit)" if limited else ""
    message = f"{human_bytes(available)} available of {human_bytes(total)}{scope}"
    fix = (
        "free memory on the machine, keep fewer batches in flight (lower num_workers or "
        "prefetch_factor), set pin_memory=False if RAM is what runs out, or give the job more "
        "memory (docker run --memory, Kubernetes resources.limits.memory)"
    )
    # Batches in flight sit in /dev/shm (RAM) and once more as pinned copies.
    if available < a.in_flight_bytes:
        return Check(
            "ram",
            FAIL,
            available,
            "bytes",
            message + f": less than the {human_bytes(a.in_flight_bytes)} of batches in flight",
            fix,
        )
    if available < RAM_LOW_FRACTION * total:
        return Check(
            "ram",
            WARN,
            available,
            "bytes",
            message + f": under {RAM_LOW_FRACTION:.0%}; the page cache for the dataset is the "
            "first thing the kernel gives up, then pinned batches fail",
            fix,
        )
    return Check("ram", OK, available, "bytes", message)


def check_cgroup_memory(facts: dict) -> Check:
    limit = _get(facts, "memory", "cgroup_limit_bytes")
    usage = _get(facts, "memory", "cgroup_usage_bytes")
    working = _get(facts, "memory", "cgroup_working_set_bytes")
    total = _get(facts, "memory", "total_bytes")
    if limit is None:
        if not facts.get("cgroup_version"):
            return Check(
                "cgroup_memory", UNKNOWN, None, "bytes", "cgroup memory limit could not be read"
            )
        used = f"; cgroup uses {human_bytes(usage)}" if usage is not None else ""
        return Check("cgroup_memory", OK, None, "bytes", f"no cgroup memory limit{used}")
    used = working if working is not None else usage
    message = f"limit {human_bytes(limit)} ({_get(facts, 'memory', 'cgroup_source')})"
    if used is not None:
        message += f", {human_bytes(used)} in use ({used / limit:.0%}, page cache excluded)"
    if total is not None and limit < total:
        message += (
            f"; the machine has {human_bytes(total)} but this job may use only "
            f"{human_bytes(limit)}: every worker's memory and every /dev/shm batch counts"
        )
    if used is not None and used > CGROUP_MEMORY_HIGH_FRACTION * limit:
        return Check(
            "cgroup_memory",
            WARN,
            limit,
            "bytes",
            message + ": near the limit, the OOM killer takes a worker next",
            "raise the memory limit (docker run --memory, Kubernetes resources.limits.memory) "
            "or use fewer workers; datasets holding Python lists/dicts grow every worker by "
            "copy-on-write: keep them in numpy arrays",
        )
    return Check("cgroup_memory", OK, limit, "bytes", message)


def check_swap(facts: dict) -> Check:
    total = _get(facts, "memory", "swap_total_bytes")
    free = _get(facts, "memory", "swap_free_bytes")
    if total is None or free is None:
        return Check("swap", UNKNOWN, None, "bytes", "swap could not be read from /proc/meminfo")
    if total == 0:
        return Check(
            "swap",
            OK,
            0,
            "bytes",
            "no swap: when memory runs out the OOM killer ends a worker instead of the job "
            "slowing down",
        )
    used = total - free
    message = f"{human_bytes(used)} of {human_bytes(total)} swap in use"
    if used > SWAP_IN_USE_WARN_BYTES:
        return Check(
            "swap",
            WARN,
            used,
            "bytes",
            message + ": swapped-out pages of the trainer or its workers stall steps while "
            "they fault back in",
            "free memory before training (or pin_memory=False and fewer workers if the job "
            "itself swaps); check with `free -h` and `vmstat 1` (si/so columns)",
        )
    return Check("swap", OK, used, "bytes", message)


# --- limits ------------------------------------------------------------------------------------


def check_fd_limit(facts: dict) -> Check:
    soft = _get(facts, "limits", "nofile_soft")
    hard = _get(facts, "limits", "nofile_hard")
    open_fds = _get(facts, "limits", "open_fds")
    strategy = _get(facts, "torch", "sharing_strategy")
    if soft is None and hard is None:
        return Check("fd_limit", OK, None, "fds", "open files unlimited (RLIMIT_NOFILE)")
    if soft is None:
        return Check("fd_limit", UNKNOWN, None, "fds", "RLIMIT_NOFILE could not be read")
    strat = (
        f"sharing strategy {strategy} ({_get(facts, 'torch', 'sharing_strategy_source')})"
        if strategy
        else "sharing strategy unknown (torch not found)"
    )
    message = (
        f"soft limit {soft}, hard {hard if hard is not None else 'unlimited'}; "
        f"{open_fds if open_fds is not None else 'unknown'} open now; {strat}"
    )
    target = 65536 if hard is None else min(hard, 65536)
    fix = (
        f"raise it before starting the job: ulimit -n {target} (no root needed up to the hard "
        "limit; Docker: --ulimit nofile=65536:65536; systemd: LimitNOFILE=), or call "
        "torch.multiprocessing.set_sharing_strategy('file_system') at the top of the script: "
        "tensors then travel as named files in /dev/shm instead of fds, but a worker that dies "
        "can leave its files behind until reboot"
    )
    if strategy not in (None, "file_descriptor"):
        return Check("fd_limit", OK, soft, "fds", message + ": the fd limit does not bind it")
    if soft < NOFILE_WARN_BELOW:
        return Check(
            "fd_limit",
            WARN,
            soft,
            "fds",
            message + f": under {NOFILE_WARN_BELOW}, loaders passing many tensors per batch "
            'fail with "Too many open files" (and the main process then waits forever)',
            fix,
        )
    if open_fds is not None and open_fds > OPEN_FDS_WARN_FRACTION * soft:
        return Check(
            "fd_limit",
            WARN,
            soft,
            "fds",
            message + ": more than half already open",
            fix,
        )
    return Check("fd_limit", OK, soft, "fds", message)


def check_memlock(facts: dict, a: Assumptions) -> Check:
    soft = _get(facts, "limits", "memlock_soft")
    devices = _get(facts, "cuda", "devices") or _get(facts, "gpu", "devices") or []
    if soft is None:
        return Check("memlock", OK, None, "bytes", "locked memory unlimited (RLIMIT_MEMLOCK)")
    message = f"RLIMIT_MEMLOCK {human_bytes(soft)}"
    if not devices:
        return Check(
            "memlock",
            OK,
            soft,
            "bytes",
            message + "; matters only with a GPU (pin_memory=True) and RDMA, and no CUDA "
            "device was found",
        )
    if soft < a.in_flight_bytes:
        return Check(
            "memlock",
            WARN,
            soft,
            "bytes",
            message + f": below the {human_bytes(a.in_flight_bytes)} of batches in flight. "
            "CUDA's own pinned buffers are not counted against it, but RDMA registration "
            "(NCCL over InfiniBand, GPUDirect) and some container runtimes are",
            "ulimit -l unlimited (Docker: --ulimit memlock=-1; Kubernetes: set it in the "
            "container runtime's default ulimits)",
        )
    return Check("memlock", OK, soft, "bytes", message)


# --- machine load, torch, CUDA -----------------------------------------------------------------


def cpu_contended(facts: dict) -> bool:
    """Whether the pressure check will warn about the CPU: then `dldoctor check` reads who uses
    it (`_ext.top_cpu_users`) into facts["cpu_top"] before the checks run."""
    p = facts.get("pressure") or {}
    values = {k: p.get(f"{k}_some_avg10") for k in ("cpu", "io", "memory")}
    known = {k: v for k, v in values.items() if v is not None}
    return (
        bool(known)
        and max(known, key=lambda k: known[k]) == "cpu"
        and (known["cpu"] > PRESSURE_WARN_PCT)
    )


def _cpu_user(u: dict, long: bool) -> str:
    text = f"{u['comm']} (pid {u['pid']}, {u['cpu_pct']:.0f}% of a CPU"
    if long and u.get("cmdline"):
        text += f": {u['cmdline']}"
    return text + ")"


def check_pressure(facts: dict) -> Check:
    p = facts.get("pressure") or {}
    values = {k: p.get(f"{k}_some_avg10") for k in ("cpu", "io", "memory")}
    known = {k: v for k, v in values.items() if v is not None}
    if not known:
        return Check(
            "pressure", UNKNOWN, None, "%", "/proc/pressure not readable (kernel without PSI)"
        )
    worst = max(known, key=lambda k: known[k])
    message = ", ".join(
        f"{k} {v:.1f}%" if v is not None else f"{k} unknown" for k, v in values.items()
    )
    message = "tasks stalled in the last 10 s: " + message
    if known[worst] > PRESSURE_WARN_PCT:
        message += (
            f": something else is competing for {worst} now, so loader speed will vary with it"
        )
        fix = (
            "find the competing processes (top, iotop) before measuring; for a real job, "
            "reserve the CPUs (taskset, cpusets) or storage it needs"
        )
        top = facts.get("cpu_top") if worst == "cpu" else None
        if top:
            message += "; using the CPU most over the last second: " + ", ".join(
                _cpu_user(u, long=False) for u in top
            )
            fix = (
                "the processes using the CPU most over the last second: "
                + "; ".join(_cpu_user(u, long=True) for u in top)
                + ". Let them finish (a build, another job) before measuring, or stop them; for "
                "a real job, reserve the CPUs it needs (taskset, cpusets)"
            )
        elif worst == "cpu" and "cpu_top" in facts:
            message += f"; no process used over {TOP_CPU_MIN_PCT:.0f}% of a CPU in the last second"
        return Check("pressure", WARN, known[worst], "%", message, fix)
    return Check("pressure", OK, known[worst], "%", message)


def check_torch(facts: dict) -> Check:
    t = facts.get("torch") or {}
    if not t.get("installed"):
        python = _get(facts, "python", "executable") or "this Python"
        return Check(
            "torch",
            WARN,
            None,
            "",
            f"torch is not installed for {python}",
            "run dldoctor with the Python that runs training (python -m dldoctor check)",
        )
    return Check(
        "torch", OK, t.get("version"), "", f"torch {t.get('version') or '(version unknown)'}"
    )


def check_gpu(facts: dict) -> Check:
    """The GPUs as NVIDIA's driver lists them (NVML, opened at run time): what `dldoctor run`
    samples. torch's own view follows (check_cuda)."""
    g = facts.get("gpu") or {}
    if not g.get("measured"):
        why = g.get("not_measured") or "NVML was not read"
        return Check("gpu", UNKNOWN, None, "GPUs", f"GPU not measured: {why}")
    devices = g.get("devices") or []
    driver = f" (driver {g['driver_version']})" if g.get("driver_version") else ""
    errors = g.get("device_errors") or []
    if not devices:
        extra = ": " + "; ".join(errors) if errors else ""
        return Check("gpu", OK, 0, "GPUs", f"NVML{driver} lists no GPU{extra}")
    parts, full = [], []
    for d in devices:
        total, used = d.get("memory_total_bytes"), d.get("memory_used_bytes")
        text = f"GPU {d['index']} {d.get('name') or '?'}"
        if total is not None:
            text += f" {human_bytes(total)}"
            if used is not None:
                text += f", {human_bytes(used)} used"
                if total - used < GPU_FREE_WARN_FRACTION * total:
                    full.append(f"GPU {d['index']}")
        if d.get("utilization_pct") is not None:
            text += f", a kernel running {d['utilization_pct']}% of the time"
        parts.append(text)
    message = f"{len(devices)} GPU{'s' if len(devices) != 1 else ''} through NVML{driver}: " + (
        "; ".join(parts)
    )
    if errors:
        message += "; not readable: " + "; ".join(errors)
    if full:
        return Check(
            "gpu",
            WARN,
            len(devices),
            "GPUs",
            message + f": {', '.join(full)} almost full before training starts",
            "find the process holding it (nvidia-smi) or pick another device "
            "(CUDA_VISIBLE_DEVICES)",
        )
    return Check("gpu", OK, len(devices), "GPUs", message)


def check_cuda(facts: dict) -> Check:
    c = facts.get("cuda") or {}
    devices = c.get("devices") or []
    if not devices:
        return Check(
            "cuda", OK, 0, "devices", "no CUDA device: " + (c.get("reason") or "none found")
        )
    parts = []
    low = []
    for d in devices:
        parts.append(
            f"cuda:{d['index']} {d['name']} {human_bytes(d['free_bytes'])} free of "
            f"{human_bytes(d['total_bytes'])}"
        )
        if d["free_bytes"] < GPU_FREE_WARN_FRACTION * d["total_bytes"]:
            low.append(f"cuda:{d['index']}")
    message = "; ".join(parts)
    if low:
        return Check(
            "cuda",
            WARN,
            len(devices),
            "devices",
            message + f": {', '.join(low)} almost full before training starts",
            "find the process holding it (nvidia-smi) or pick another device "
            "(CUDA_VISIBLE_DEVICES)",
        )
    return Check("cuda", OK, len(devices), "devices", message)


# --- storage -----------------------------------------------------------------------------------

_STAGE_FIX = (
    "copy the dataset to local disk or NVMe before training (rsync -a SRC /local/data), or "
    "pack small files into shards (WebDataset tar, LMDB, Parquet); with data on the network, "
    "more workers than cores help, because I/O-bound workers sleep; keep "
    "persistent_workers=True"
)


def check_storage_fs(facts: dict) -> Check:
    s = facts["storage"]
    where = f"{s['path']} is on {s['fs_type'] or 'an unknown fs'} ({s['source'] or '?'} at {s['mount_point'] or '?'})"
    if s["network_fs"]:
        return Check(
            "storage_fs",
            WARN,
            s["fs_type"],
            "",
            where + ": a network filesystem; every open, stat and read is a round trip, so "
            "loaders of many small files wait on latency, not bandwidth",
            _STAGE_FIX,
        )
    if not s["fs_type"]:
        return Check("storage_fs", UNKNOWN, None, "", where + " (mountinfo unreadable)")
    return Check("storage_fs", OK, s["fs_type"], "", where)


def check_storage_disk(facts: dict) -> Check:
    s = facts["storage"]
    dev = s["block_device"]
    if not dev:
        return Check(
            "storage_disk",
            OK if s["fs_type"] else UNKNOWN,
            None,
            "",
            f"no block device behind {s['fs_type'] or 'the path'} ({s['device_numbers'] or '?'})",
        )
    rot = s["rotational"]
    if rot is None:
        return Check("storage_disk", UNKNOWN, dev, "", f"{dev}: rotational flag unreadable")
    if not rot:
        return Check("storage_disk", OK, dev, "", f"{dev}: solid state")
    mb_s = s["read_mb_s"]
    if mb_s is not None and not s["probe_cached"] and mb_s > ROTATIONAL_MAX_MB_S:
        return Check(
            "storage_disk",
            OK,
            dev,
            "",
            f"{dev}: the kernel calls it rotational, but it read {mb_s:.0f} MB/s, beyond any "
            "spinning disk: a virtual disk",
        )
    return Check(
        "storage_disk",
        WARN,
        dev,
        "",
        f"{dev}: rotational (the kernel's flag; virtual disks often claim it too): random reads "
        "of small files reach ~100 per second on a spinning disk",
        "move the dataset to an SSD, read it in large sequential shards (WebDataset tar, LMDB), "
        "or cache it in RAM if it fits",
    )


def check_storage_read(facts: dict) -> Check:
    s = facts["storage"]
    mb_s = s["read_mb_s"]
    if mb_s is None:
        return Check(
            "storage_read", UNKNOWN, None, "MB/s", "no file could be read for the probe (empty?)"
        )
    how = f"{mb_s:.0f} MB/s reading {human_bytes(s['probe_bytes'])} from the largest files"
    if s["probe_cached"]:
        return Check(
            "storage_read",
            OK,
            mb_s,
            "MB/s",
            how + " through the page cache (O_DIRECT refused here): not the device's rate",
        )
    if mb_s < STORAGE_SLOW_MB_S:
        return Check(
            "storage_read",
            WARN,
            mb_s,
            "MB/s",
            how + f" bypassing the page cache: under {STORAGE_SLOW_MB_S:.0f} MB/s, storage "
            "caps most image-training jobs unless the data fits in the page cache",
            _STAGE_FIX,
        )
    return Check("storage_read", OK, mb_s, "MB/s", how + " bypassing the page cache")


def check_dataset_size(facts: dict) -> Check:
    s = facts["storage"]
    files, size = s["files"], s["bytes"]
    at_least = "at least " if s["count_truncated"] else ""
    message = f"{at_least}{files} files, {at_least}{human_bytes(size)}"
    if s["count_truncated"]:
        message += " (count stopped at its bound)"
    total, _ = effective_memory(facts)
    if total is None or size is None:
        return Check("dataset_size", OK, size, "bytes", message)
    fits = size < CACHE_FIT_FRACTION * total
    if fits and s["count_truncated"]:
        return Check(
            "dataset_size",
            OK,
            size,
            "bytes",
            message + f": whether it fits in the page cache (half of {human_bytes(total)} RAM) "
            "is unknown; raise --max-seconds to count it all",
        )
    if fits:
        return Check(
            "dataset_size",
            OK,
            size,
            "bytes",
            message + f": fits in the page cache ({human_bytes(total)} RAM), so epochs after "
            "the first read from memory",
        )
    slow = s["network_fs"] or (s["read_mb_s"] is not None and s["read_mb_s"] < STORAGE_SLOW_MB_S)
    message += f": does not fit in half of RAM ({human_bytes(total)}), every epoch reads storage"
    if slow:
        return Check(
            "dataset_size", WARN, size, "bytes", message + " - and storage is slow", _STAGE_FIX
        )
    return Check("dataset_size", OK, size, "bytes", message)


# --- all ---------------------------------------------------------------------------------------


def run_checks(facts: dict, a: Assumptions) -> list[Check]:
    """Every check, in the order a user reads them; storage checks when facts has `storage`."""
    checks = [
        check_cpus(facts),
        check_workers(facts, a),
        check_shm(facts, a),
        check_ram(facts, a),
        check_cgroup_memory(facts),
        check_swap(facts),
        check_fd_limit(facts),
        check_memlock(facts, a),
        check_pressure(facts),
        check_gpu(facts),
        check_torch(facts),
        check_cuda(facts),
    ]
    if facts.get("storage"):
        checks += [
            check_storage_fs(facts),
            check_storage_disk(facts),
            check_storage_read(facts),
            check_dataset_size(facts),
        ]
    return checks


def _num(x: float | None) -> str:
    if x is None:
        return "unknown"
    return str(int(x)) if float(x).is_integer() else f"{x:.2f}".rstrip("0")
