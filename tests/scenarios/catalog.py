"""Every scenario job as data: how to run it under `dldoctor run` and what it must produce.

A plain list other tools import (bench/accuracy.py runs them all and prints a confusion
table). Each entry:

    name         unique label, "<script>" or "<script>/<variant>"
    script       tests/scenarios/<script>.py
    args         the job's arguments
    doctor_args  arguments of `dldoctor run` before `--` (e.g. the hang doctor's)
    expect       a finding id the run must report (at `severity` or above), "healthy" (no
                 warning or critical finding at all), or "no <id>" (that id must not be
                 reported; the run is a healthy twin: any warning or critical finding in it is
                 a false positive)
    severity     the least severity that counts for `expect` (default "warning")
    needs        the real fault to set up around it: {"shm_mib": N} (a mount namespace whose
                 /dev/shm is N MiB), {"memory_cgroup_mib": N} (a memory cgroup of N MiB whose
                 path is passed as --cgroup), {"root": True}
    timeout      seconds for the whole run (default 120)

Scenarios whose script is not there yet are skipped by the runners (`available()`).
"""

from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))

HANG = ["--hang-timeout", "3", "--on-hang", "abort"]
QUIET = ["-q"]

SCENARIOS: list[dict] = [
    # -- throughput: field guide causes 1, 2, 4 ---------------------------------------------
    {"name": "too_many_workers", "script": "too_many_workers", "args": ["--seconds", "7"],
     "expect": "too_many_workers"},
    {"name": "too_many_workers/healthy", "script": "too_many_workers",
     "args": ["--healthy", "--seconds", "7"], "expect": "no too_many_workers"},
    {"name": "slow_getitem", "script": "slow_getitem", "args": ["--seconds", "7"],
     "expect": "slow_getitem"},
    {"name": "slow_getitem/healthy", "script": "slow_getitem",
     "args": ["--healthy", "--seconds", "7"], "expect": "healthy"},
    {"name": "slow_collate", "script": "slow_collate", "args": ["--seconds", "7"],
     "expect": "slow_collate"},
    {"name": "slow_collate/healthy", "script": "slow_collate",
     "args": ["--healthy", "--seconds", "7"], "expect": "healthy"},
    {"name": "io_slow_source", "script": "io_slow_source", "args": ["--seconds", "7"],
     "expect": "io_bound"},
    {"name": "io_slow_source/healthy", "script": "io_slow_source",
     "args": ["--healthy", "--seconds", "7"], "expect": "no io_bound"},
    {"name": "io_throttled_disk", "script": "io_throttled_disk", "args": ["--seconds", "7"],
     "expect": "io_bound", "needs": {"root": True}},
    {"name": "slow_consumer", "script": "slow_consumer", "args": ["--seconds", "7"],
     "expect": "healthy"},
    {"name": "slow_consumer/busy", "script": "slow_consumer", "args": ["--busy", "--seconds", "7"],
     "expect": "main_process_bound", "severity": "info"},
    # -- hangs: field guide cause 6 ----------------------------------------------------------
    {"name": "collate_deadlock", "script": "collate_deadlock", "args": ["--seconds", "30"],
     "doctor_args": HANG, "expect": "collate_deadlock"},
    {"name": "collate_deadlock/healthy", "script": "collate_deadlock",
     "args": ["--healthy", "--seconds", "6"], "doctor_args": HANG, "expect": "healthy"},
    {"name": "getitem_hang", "script": "getitem_hang", "args": ["--seconds", "30"],
     "doctor_args": HANG, "expect": "worker_hang"},
    {"name": "getitem_hang/healthy", "script": "getitem_hang",
     "args": ["--healthy", "--seconds", "4"], "doctor_args": HANG, "expect": "no worker_hang"},
    # -- failures: field guide cause 3, worker deaths, fd limits -----------------------------
    {"name": "shm_exhausted", "script": "shm_exhausted", "args": ["--seconds", "4"],
     "doctor_args": QUIET, "expect": "shm_exhausted", "needs": {"shm_mib": 24}},
    {"name": "shm_exhausted/tight", "script": "shm_exhausted", "args": ["--seconds", "4", "--tight"],
     "doctor_args": QUIET, "expect": "shm_exhausted", "needs": {"shm_mib": 24}},
    {"name": "shm_exhausted/sigbus", "script": "shm_exhausted",
     "args": ["--seconds", "4", "--sigbus"], "doctor_args": QUIET, "expect": "shm_exhausted",
     "needs": {"shm_mib": 24}},
    {"name": "shm_exhausted/healthy", "script": "shm_exhausted",
     "args": ["--seconds", "4", "--healthy"], "doctor_args": QUIET, "expect": "no shm_exhausted",
     "needs": {"shm_mib": 24}},
    {"name": "worker_exit", "script": "worker_exit", "args": ["--seconds", "5"],
     "doctor_args": QUIET, "expect": "worker_died"},
    {"name": "worker_exit/healthy", "script": "worker_exit", "args": ["--healthy", "--seconds", "3"],
     "doctor_args": QUIET, "expect": "no worker_died"},
    {"name": "worker_oom", "script": "worker_oom", "args": ["--seconds", "8"],
     "doctor_args": QUIET, "expect": "worker_died", "needs": {"memory_cgroup_mib": 256}},
    {"name": "worker_oom/healthy", "script": "worker_oom", "args": ["--healthy", "--seconds", "3"],
     "doctor_args": QUIET, "expect": "no worker_died", "needs": {"memory_cgroup_mib": 256}},
    {"name": "fd_limit", "script": "fd_limit", "args": ["--seconds", "10"], "doctor_args": QUIET,
     "expect": "fd_limit"},
    {"name": "fd_limit/healthy", "script": "fd_limit", "args": ["--healthy", "--seconds", "3"],
     "doctor_args": QUIET, "expect": "no fd_limit"},
    {"name": "crash/healthy", "script": "crash", "args": ["--healthy", "--seconds", "2"],
     "doctor_args": QUIET, "expect": "healthy"},
    # -- beyond the field guide (issue 6) ----------------------------------------------------
    {"name": "thread_oversubscription", "script": "thread_oversubscription",
     "args": ["--seconds", "8"], "expect": "thread_oversubscription"},
    {"name": "thread_oversubscription/healthy", "script": "thread_oversubscription",
     "args": ["--healthy", "--seconds", "8"], "expect": "healthy"},
    {"name": "thread_oversubscription/idle", "script": "thread_oversubscription",
     "args": ["--idle", "--seconds", "8"], "expect": "healthy"},
    {"name": "thread_oversubscription/capped", "script": "thread_oversubscription",
     "args": ["--capped", "--seconds", "8"], "expect": "no thread_oversubscription"},
    {"name": "cow_growth", "script": "cow_growth", "args": ["--seconds", "12"],
     "expect": "cow_memory_growth"},
    {"name": "cow_growth/healthy", "script": "cow_growth", "args": ["--healthy", "--seconds", "12"],
     "expect": "healthy"},
    {"name": "startup_cost", "script": "startup_cost", "args": [], "expect": "worker_startup_cost",
     "timeout": 180},
    {"name": "startup_cost/healthy", "script": "startup_cost", "args": ["--healthy"],
     "expect": "healthy", "timeout": 180},
    {"name": "straggler", "script": "straggler", "args": ["--seconds", "8"],
     "expect": "straggler_worker"},
    {"name": "straggler/healthy", "script": "straggler", "args": ["--healthy", "--seconds", "8"],
     "expect": "healthy"},
]


def script_path(entry: dict) -> str:
    return os.path.join(HERE, entry["script"] + ".py")


def available(entries: list[dict] | None = None) -> list[dict]:
    """The entries whose script exists (others are being written elsewhere)."""
    return [e for e in (SCENARIOS if entries is None else entries) if os.path.exists(script_path(e))]


def is_twin(entry: dict) -> bool:
    """A healthy twin: expected to produce no warning or critical finding of its kind."""
    return entry["expect"] == "healthy" or entry["expect"].startswith("no ")
