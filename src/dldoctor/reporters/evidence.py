"""A finding's evidence for people: its entries grouped (the loop; the fetch, per sample and per
batch; CPU; memory; the machine; the process), each with its unit, paths shortened, and one line wherever two figures
of the same thing differ. Rendering only: the JSON keeps the evidence as the rules wrote it.
"""

from __future__ import annotations

import os
import re

# Groups in the order they are shown; a key no pattern claims goes to "other".
GROUPS = ("loop", "fetch", "CPU", "memory", "machine", "process", "other")

# (group, pattern on the key), first match wins. The keys are those the rules emit
# (src/dldoctor_core/analyze/rules/*.cpp, capacity.cpp's add_fetch_evidence).
_GROUP_PATTERNS = [
    (
        "fetch",
        r"^(getitem|collate|fetch|stack|hot_|top_|slow_sample|samples_in_batch|"
        r"per_sample|user_frame|frame$|raised_at|exception$|message$|times_raised|dataset_length|"
        r"samples_per_worker|samples$|samples_read$|first_batch_latency|batch_ms_per_worker|slow_worker)",
    ),
    (
        "loop",
        r"^(data_stall|consumer|worker_capacity|step_ms|wait|head_of_line|samples_per_batch|"
        r"batch_size$|batch_index|batches_before|slow_batches|slowest_batches|epoch|"
        r"first_epoch|startup|restarts|held_batches|stalled_s|gating|others_|ranks$|"
        r"gpu_idle|gpu_utilization|handover|stall_beyond|ready_batches)",
    ),
    (
        "CPU",
        r"^(num_workers|total_workers|usable_cpus|main_process_cpu|other_processes_cpu|"
        r"cpu_|run_queue|worker_on_cpu|worker_cpu|worker_run_queue|main_run_queue|involuntary|"
        r"recommended_(num_workers|threads)|threads_per_worker|torch_threads|thread_pools|pool_env|"
        r"active_threads|start_method|prefetch_factor|persistent_workers|idle_worker_share|"
        r"active_workers|workers_ran_out|workers_without_data|ran_out$|short_handed)",
    ),
    (
        "memory",
        r"^(shm_|mem_|cgroup_|swap_|pin|pss_|private_dirty|worker_rss|in_flight|"
        r"batch_bytes|headroom|budget_bytes|fixed_bytes|allocated|reserved|peak_allocated|"
        r"tried_to_allocate|gpu_total|gpu_free|largest_batch|fits_today|memory_pressure|"
        r"machine_oom|python_object|projected_growth|workers_growing|pickled|batches_in_flight|"
        r"sharing_strategy|batch_sizes_measured|rank_in_flight|rss_per_rank)",
    ),
    (
        "machine",
        r"^(storage|data_|io_|all_read|nofile|open_fds|recommended_nofile|"
        r"job_started_nofile|accelerator)",
    ),
    (
        "process",
        r"^(worker$|pid$|worker_pid|process_pid|state$|wchan|syscall|stage$|where$|"
        r"stuck_workers|dead_workers|deaths|exit_|signal|reason$|cause$|failure|error|stderr_tail|"
        r"main_thread|busy$|process_rank$)",
    ),
]
_GROUP_RES = [(g, re.compile(p)) for g, p in _GROUP_PATTERNS]

# Unit suffixes of the keys: (suffix, unit, how the value is shown). The suffix is taken off
# the label and the unit put on the value.
_PER_S_UNITS = {
    "batches": "batches/s",
    "pages": "pages/s",
    "mb": "MB/s",
    "mib": "MiB/s",
    "cs": "switches/s",
}


def group_of(key: str) -> str:
    for group, pattern in _GROUP_RES:
        if pattern.search(key):
            return group
    return "other"


def _num(v: float) -> str:
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}" if abs(v) >= 10000 else str(int(v))
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"


def human_bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{_num(n)} B"


# Labels a suffix rule would leave unclear.
_LABELS = {
    "consumer_batches_per_s": "consumer takes",
    "involuntary_cs_per_s": "involuntary",
    "handover_fraction": "waiting for ready batches",
    "handover_ms": "hand-over per batch",
    "handover_measured_batches": "hand-overs measured",
    "handover_measured_p50_ms": "measured hand-over, median",
    "run_queue_ms_per_batch": "queued for a CPU, per batch",
    "cpu_steal_ms_per_batch": "CPU stolen by the hypervisor, per batch",
    "stall_beyond_handover_fraction": "waiting for batches not yet made",
    "ready_batches_mean": "batches ready, mean",
}
# Keys whose unit their name does not end with.
_UNITS = {"cpu_left_for_workers": "CPUs"}


def label_and_value(key: str, value) -> tuple[str, str]:
    """The entry as people read it: the key without its unit suffix, the value with the unit
    ("getitem_p50_ms", 20.4 -> "getitem p50", "20.4 ms")."""
    label, text = _label_and_value(key, value)
    return _LABELS.get(key, label), text


def _label_and_value(key: str, value) -> tuple[str, str]:
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return _label(key), str(value)
    if key in _UNITS:
        return _label(key), f"{_num(float(value))} {_UNITS[key]}"
    v = float(value)
    m = re.match(r"^(.*)_([a-z]+)_per_s$", key)
    if m and m.group(2) in _PER_S_UNITS:
        return _label(m.group(1)), f"{_num(v)} {_PER_S_UNITS[m.group(2)]}"
    for suffix, fmt in _SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            return _label(key[: -len(suffix)]), fmt(v)
    if ("_share" in key or key.startswith("share")) and 0 <= v <= 1:  # shares are 0..1
        return _label(key), f"{_num(v * 100)} %"
    # A unit inside the name ("pinned_bytes_in_flight", "epoch_s_mean"): taken out of the label.
    words = key.split("_")
    for unit, fmt in _UNIT_WORDS.items():
        if unit in words[1:]:
            return _label("_".join(w for w in words if w != unit)), fmt(v)
    return _label(key), _num(v)


# A unit as one word of a key, at its end or inside it.
_UNIT_WORDS = {
    "bytes": human_bytes,
    "mib": lambda x: f"{_num(x)} MiB",
    "ms": lambda x: f"{_num(x)} ms",
    "pct": lambda x: f"{_num(x)} %",
    "s": lambda x: f"{_num(x)} s",
}
# Key endings, the longer ones first ("_s_per_restart" before "_per_s" before "_s").
_SUFFIXES = (
    ("_mib_per_1000_samples", lambda x: f"{_num(x)} MiB per 1000 samples"),
    ("_mib_total", lambda x: f"{_num(x)} MiB in all"),
    ("_mb_s", lambda x: f"{_num(x)} MB/s"),
    ("_ms_each", lambda x: f"{_num(x)} ms each"),
    ("_s_per_restart", lambda x: f"{_num(x)} s per restart"),
    ("_pct_each", lambda x: f"{_num(x)} % each"),
    ("_fraction", lambda x: f"{_num(x * 100)} %"),
    ("_cores", lambda x: f"{_num(x)} CPUs"),
    ("_per_s", lambda x: f"{_num(x)}/s"),
    *((f"_{unit}", fmt) for unit, fmt in _UNIT_WORDS.items()),
)


def _label(stem: str) -> str:
    text = stem.replace("_", " ")
    return re.sub(r"\b(cpu|cpus|gpu|shm|rss|pss|io|fd|fds|mb|mib)\b", _upper, text)


def _upper(m: re.Match) -> str:
    word = m.group(1)
    return {
        "mib": "MiB",
        "mb": "MB",
        "cpus": "CPUs",
        "fds": "fds",
        "fd": "fd",
        "shm": "/dev/shm",
    }.get(word, word.upper())


# -- paths ----------------------------------------------------------------------------------

# An absolute path inside a text: up to a space, a quote, a bracket, a comma or ':<line>'.
_PATH_RE = re.compile(r"(?<![\w.])/[^\s:()\[\]'\",;]+")
_SITE_RE = re.compile(r"^.*/(?:site|dist)-packages/")


def short_path(path: str, cwd: str | None = None) -> str:
    """A file inside site-packages as package/module.py; one under the working directory
    relative to it; any other as it is."""
    m = _SITE_RE.match(path)
    if m:
        return path[m.end() :]
    cwd = os.getcwd() if cwd is None else cwd
    if cwd and cwd != "/" and path.startswith(cwd.rstrip("/") + "/"):
        return path[len(cwd.rstrip("/")) + 1 :]
    return path


def short_paths(text: str, cwd: str | None = None) -> str:
    """Every absolute path in `text` shortened by short_path()."""
    if "/" not in text:
        return text
    cwd = os.getcwd() if cwd is None else cwd
    return _PATH_RE.sub(lambda m: short_path(m.group(0), cwd), text)


# -- two figures of one thing ---------------------------------------------------------------

# The profile's mean and the hooks' median differ by more than this share before the report
# explains it: within a tenth, they read as the same figure.
DIFFER_SHARE = 0.10
_GETITEM_CALL_RE = re.compile(r"([\w.<>]*__getitem__)\s*(?:\([^)]*\))?\s*([\d.]+) ms/call")


def differing_figures(evidence: dict) -> list[str]:
    """One line for each pair of figures of the same thing that differ. The hooks' per-sample
    __getitem__ median (getitem_p50_ms) against the profile's ms/call for __getitem__
    (hot_functions): how each is measured (src/dldoctor/job/profiling.py, analyze/session.cpp)."""
    out = []
    p50 = evidence.get("getitem_p50_ms")
    hot = evidence.get("hot_functions")
    if isinstance(p50, (int, float)) and isinstance(hot, str):
        m = _GETITEM_CALL_RE.search(hot)
        if m:
            per_call = float(m.group(2))
            if p50 > 0 and abs(per_call - p50) > DIFFER_SHARE * max(per_call, p50):
                out.append(
                    f"getitem p50 ({_num(p50)} ms) and the profile's {_num(per_call)} ms/call "
                    f"for {m.group(1)} measure it differently: the first is the median per "
                    "sample over every timed batch (the batch's fetch less its collate, divided "
                    "by its samples), without a profiler; the second is the mean over the few "
                    "fetches that were profiled, which run under Python's profiler (it slows "
                    "every Python call) and count the slow samples that a median leaves out."
                )
    return out


def grouped(evidence: dict, cwd: str | None = None) -> list[tuple[str, list[tuple[str, str]]]]:
    """(group, [(label, value)]) in GROUPS order, entries in the rules' order within a group;
    string values with their paths shortened."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for key, value in evidence.items():
        label, text = label_and_value(key, value)
        if isinstance(value, str):
            text = short_paths(text, cwd)
        groups.setdefault(group_of(key), []).append((label, text))
    return [(g, groups[g]) for g in GROUPS if g in groups]


# A value longer than this (a list of functions, a stderr tail) gets a line of its own.
LONG_VALUE_CHARS = 40


def lines(entries: list[tuple[str, str]]) -> list[str]:
    """A group's entries as lines: the short ones together ("data stall 88.3 %, consumer
    demand 37.1 batches/s"), each long one on its own ("hot functions: ...")."""
    short = [f"{label} {value}" for label, value in entries if len(value) <= LONG_VALUE_CHARS]
    out = [", ".join(short)] if short else []
    out += [f"{label}: {value}" for label, value in entries if len(value) > LONG_VALUE_CHARS]
    return out
