"""Every scenario job as data: how to run it under `dldoctor run` and what it must produce.

The only list of scenarios: tests/test_scenarios.py runs each entry and checks it,
bench/accuracy.py runs them all and prints a confusion table. Each entry:

    name         unique label, "<script>" or "<script>/<variant>"
    script       tests/scenarios/<script>.py, named after the finding id it proves (its
                 healthy twins are variants of the same script)
    args         the job's arguments
    doctor_args  arguments of `dldoctor run` before `--` (e.g. the hang doctor's)
    expect       a finding id the run must report (at `severity` or above), "healthy" (no
                 warning or critical finding at all), or "no <id>" (a healthy twin that must
                 not report that id at any severity, nor any warning or critical finding)
    severity     the least severity that counts for `expect` (default "warning")
    needs        the real fault to set up around it: {"shm_mib": N} (a mount namespace whose
                 /dev/shm is N MiB), {"memory_cgroup_mib": N} (a memory cgroup of N MiB whose
                 path is passed as --cgroup), {"root": True}, {"cpus": N} (at least N CPUs in
                 the affinity), {"no_accelerator": True} (torch sees no CUDA device),
                 {"cpu_quota": N} (`dldoctor run` and the job inside a cgroup whose CPU quota
                 is N CPUs, as in a container)
    ranks        N: the job is started by torchrun with N ranks on this node (each a main
                 process with its own loader; DDP over gloo on the CPU)
    timeout      seconds for the whole run (default 120)
    known_false_positives
                 {id: why} for a twin: a doctor defect seen on this run and not yet fixed.
                 The test reports it as an expected failure (xfail, with the reason) instead
                 of passing; bench/accuracy.py still counts it as a false positive.
    checks       what else the run must show (read by tests/test_scenarios.py):
                   returncode  the exit code of `dldoctor run` (default 0)
                   verdict     the report's verdict
                   ids         the exact list of finding ids, in order
                   absent      ids that must not be reported at any severity
                   report      {path: condition} on the report ("loaders.0.batches")
                   stderr      condition on dldoctor's and the job's stderr
                   wall_s      condition on the wall time of the whole run
                   notice      True: an early notice named `expect` while the job ran (a
                               steady bottleneck; bench/accuracy.py reports when)
                   findings    {id: {"severity": ..., "evidence": {key: condition},
                                     "relations": [(key, op, key[, factor])],
                                     field: condition}} where field is a finding key
                                (title, fix, why) or several joined by "|" (their texts
                                joined, e.g. "fix|evidence.hot_functions")
                 A condition is a value (equal), or a dict of: ">", ">=", "<", "<=" (numbers),
                 "contains" / "lacks" (a substring, or a list of them), "startswith",
                 "present" (True: the key exists; False: it does not), "nonempty" (True),
                 "len" (the number of items).
A check too specific for data lives in tests/test_<id>.py and reuses the entry's run
(doctor_run.run_entry caches it).

runs_alone(entry) says which entries tools/test runs with no other test beside them.

NO_SCENARIO gives, for each finding id (or a case of one) that no entry produces, the reason
it cannot be made here; tests/test_ids.py checks that every id has one or the other.
"""

from __future__ import annotations

import os

HERE = os.path.dirname(os.path.abspath(__file__))
MIB = 1 << 20

HANG_TIMEOUT_S = 3
HANG_BUDGET_S = 2  # DESIGN.md section 6: a hang is reported within hang-timeout + 2 s
HANG = ["--hang-timeout", str(HANG_TIMEOUT_S), "--on-hang", "abort"]
HANG_ABORT_RC = 124  # `dldoctor run --on-hang abort` ends the job and exits with 124
NAMED_IN_TIME = {"stalled_s": {"<": HANG_TIMEOUT_S + HANG_BUDGET_S}}
QUIET = ["-q"]
SHM_MIB = 24  # the /dev/shm tmpfs of the shm scenarios
OOM_MIB = 256  # the memory cgroup of the memory scenarios
TWO_CPUS = {"cpus": 2}  # thread_oversubscription runs two workers on two CPUs


def worker_hang_entry(on: str, *extra: str, name: str = "", **evidence) -> dict:
    """worker_hang.py with its worker stuck in __getitem__ on `on` ("": its default lock) and
    the `extra` arguments: named in time, at that stage and frame, with `evidence` besides."""
    return {
        "name": "worker_hang/" + (name or on) if name or on else "worker_hang",
        "script": "worker_hang",
        "args": (["--on", on] if on else []) + [*extra, "--seconds", "30"],
        "doctor_args": HANG,
        "expect": "worker_hang",
        "checks": {
            "returncode": HANG_ABORT_RC,
            "verdict": "worker_hang",
            "findings": {
                "worker_hang": {
                    "evidence": {
                        "stage": "getitem",
                        "frame": {"contains": "__getitem__"},
                        **evidence,
                        **NAMED_IN_TIME,
                    }
                }
            },
        },
    }


def uneven_worker_split_entries(source: str) -> list[dict]:
    """uneven_worker_split's scenario with the data from `source` (own, hf, webdataset), and
    its healthy twin: as many shards as workers."""
    name = "uneven_worker_split" + ("" if source == "own" else "/" + source)
    args = ["--source", source, "--seconds", "7"]
    found = {
        "name": name,
        "script": "uneven_worker_split",
        "args": args,
        "expect": "uneven_worker_split",
        "severity": "critical",
        "checks": {
            "verdict": "uneven_worker_split",
            "notice": True,
            "findings": {
                "uneven_worker_split": {
                    "evidence": {
                        "workers_without_data": 2,
                        "idle_worker_share": {">": 0.5},
                        "active_workers": {"<": 1.3},
                    },
                    "fix": {"contains": "multiple of num_workers"},
                },
                # Beside it, the fetch rule sizes the one worker with data and adds none.
                "io_bound": {
                    "evidence": {"recommended_num_workers": {"present": False}},
                    "fix": {"contains": "uneven_worker_split"},
                },
            },
        },
    }
    healthy = {
        "name": name + "/healthy",
        "script": "uneven_worker_split",
        "args": [*args, "--healthy"],
        "expect": "healthy",
        "checks": {"verdict": "healthy"},
    }
    return [found, healthy]


SCENARIOS: list[dict] = [
    # -- throughput: field guide causes 1, 2, 4 ---------------------------------------------
    {
        "name": "too_many_workers",
        "script": "too_many_workers",
        "args": ["--seconds", "7"],
        "expect": "too_many_workers",
        "checks": {
            "verdict": "too_many_workers",
            "notice": True,
            "findings": {
                "too_many_workers": {
                    "evidence": {
                        "total_workers": 6,
                        "usable_cpus": 1,
                        "run_queue_delay_pct": {">": 50},  # six busy workers share one core
                    },
                    "fix": {"contains": "num_workers=1"},
                }
            },
        },
    },
    # The same six workers not pinned but held by a CPU quota of one CPU (a container's
    # --cpus 1, a pod's CPU limit): affinity shows both cores, the quota allows one.
    {
        "name": "too_many_workers/quota",
        "script": "too_many_workers",
        "args": ["--quota", "--seconds", "8"],
        "expect": "too_many_workers",
        "needs": {"cpu_quota": 1.0, "cpus": 2},
        "checks": {
            "verdict": "too_many_workers",
            "findings": {
                "too_many_workers": {
                    "evidence": {"total_workers": 6, "usable_cpus": 1},
                    "fix": {"contains": "num_workers=1"},
                }
            },
        },
    },
    {
        "name": "too_many_workers/quota/healthy",
        "script": "too_many_workers",
        "args": ["--quota", "--healthy", "--seconds", "8"],
        "expect": "no too_many_workers",
        "needs": {"cpu_quota": 1.0, "cpus": 2},
    },
    # Two torchrun ranks of three such workers each, all on one core: the node's six workers
    # are both ranks', and each rank's loader is prescribed its own count.
    {
        "name": "too_many_workers/ranks",
        "script": "too_many_workers",
        "ranks": 2,
        "args": ["--ddp", "--seconds", "8"],
        "expect": "too_many_workers",
        "checks": {
            "verdict": "too_many_workers",
            "notice": True,
            "findings": {
                "too_many_workers": {
                    "evidence": {
                        "total_workers": 6,  # 3 per rank, both ranks
                        "ranks": 2,
                        "usable_cpus": 1,
                        "recommended_num_workers_per_rank": 1,
                        "recommended_num_workers": {"present": False},
                    },
                    "fix": {"contains": "num_workers=1 in each rank's loader"},
                }
            },
            "report": {"loaders.0.rank": 0, "loaders.1.rank": 1},
        },
    },
    {
        "name": "too_many_workers/healthy",
        "script": "too_many_workers",
        "args": ["--healthy", "--seconds", "7"],
        "expect": "no too_many_workers",
    },
    {
        "name": "slow_getitem",
        "script": "slow_getitem",
        "args": ["--seconds", "7"],
        "expect": "slow_getitem",
        "checks": {
            "verdict": "slow_getitem",
            "notice": True,
            "findings": {
                "slow_getitem": {
                    "evidence": {
                        "data_stall_fraction": {">": 0.5},
                        "getitem_p50_ms": {">": 5},  # a 1600x1200 decode + resize per sample
                    },
                    # The sampled profile names the hot step, in the evidence and in the fix.
                    "fix|evidence.hot_functions": {"contains": "decode_and_resize"},
                }
            },
        },
    },
    {
        "name": "slow_getitem/healthy",
        "script": "slow_getitem",
        "args": ["--healthy", "--seconds", "7"],
        "expect": "healthy",
        "checks": {"verdict": "healthy"},
    },
    {
        # The same decode behind Hugging Face datasets' set_transform: datasets' formatting
        # frames are hotter than the job's function, which the fix must still name.
        "name": "slow_getitem/hf",
        "script": "slow_getitem",
        "args": ["--hf", "--seconds", "8"],
        "expect": "slow_getitem",
        "checks": {
            "verdict": "slow_getitem",
            "findings": {"slow_getitem": {"fix": {"contains": "in decode_batch ("}}},
        },
    },
    {
        "name": "slow_getitem/hf/healthy",
        "script": "slow_getitem",
        "args": ["--hf", "--healthy", "--seconds", "8"],
        "expect": "healthy",
        "checks": {"verdict": "healthy"},
    },
    {
        # A new DataLoader each 1.5 s epoch, iterated by the same line: one loader over its
        # epochs, judged as one (each epoch alone is too short for a verdict).
        "name": "slow_getitem/loader_per_epoch",
        "script": "slow_getitem",
        "args": ["--seconds", "7", "--loader-per-epoch", "1.5"],
        "expect": "slow_getitem",
        "checks": {
            "verdict": "slow_getitem",
            "findings": {"slow_getitem": {"evidence": {"getitem_p50_ms": {">": 5}}}},
            "report": {"loaders": {"len": 1}, "loaders.0.batches": {">": 10}},
        },
    },
    {
        "name": "slow_getitem/loader_per_epoch/healthy",
        "script": "slow_getitem",
        "args": ["--healthy", "--seconds", "7", "--loader-per-epoch", "1.5"],
        "expect": "healthy",
        "checks": {"verdict": "healthy", "report": {"loaders": {"len": 1}}},
    },
    {
        "name": "slow_collate",
        "script": "slow_collate",
        "args": ["--seconds", "7"],
        "expect": "slow_collate",
        "checks": {
            "verdict": "slow_collate",
            "notice": True,
            "absent": ["slow_getitem"],
            "findings": {"slow_collate": {"evidence": {"collate_p50_ms": {">": 20}}}},
        },
    },
    {
        "name": "slow_collate/healthy",
        "script": "slow_collate",
        "args": ["--healthy", "--seconds", "7"],
        "expect": "healthy",
        "checks": {"verdict": "healthy"},
    },
    {
        "name": "io_bound",
        "script": "io_bound",
        "args": ["--seconds", "7"],
        "expect": "io_bound",
        "checks": {
            "verdict": "io_bound",
            "notice": True,
            "findings": {
                "io_bound": {
                    "evidence": {"worker_on_cpu_fraction": {"<": 0.3}},  # waiting, not computing
                    "why": {"contains": "more workers than"},
                }
            },
        },
    },
    {
        "name": "io_bound/healthy",
        "script": "io_bound",
        "args": ["--healthy", "--seconds", "7"],
        "expect": "no io_bound",
    },
    {
        "name": "io_bound/disk",
        "script": "io_bound",
        "args": ["--source", "disk", "--seconds", "7"],
        "expect": "io_bound",
        "needs": {"root": True},
        "checks": {
            "verdict": "io_bound",
            "notice": True,
            "findings": {
                "io_bound": {
                    "evidence": {
                        # The reads really went to the device (read_bytes), at about the
                        # throttled rate.
                        "storage_read_mb_per_s": {">": 0, "<": 8}
                    }
                }
            },
        },
    },
    {
        "name": "io_bound/disk/healthy",
        "script": "io_bound",
        "args": ["--source", "disk", "--healthy", "--seconds", "7"],
        "expect": "no io_bound",
    },
    {
        # The same device read through a mapping (np.load(mmap_mode="r"), safetensors, Arrow):
        # no read() at all, the worker waits in page faults; the bytes still count as read.
        "name": "io_bound/disk/mmap",
        "script": "io_bound",
        "args": ["--source", "disk", "--read", "mmap", "--seconds", "7"],
        "expect": "io_bound",
        "needs": {"root": True},
        "checks": {
            "verdict": "io_bound",
            "findings": {"io_bound": {"evidence": {"storage_read_mb_per_s": {">": 0, "<": 8}}}},
        },
    },
    {
        "name": "io_bound/disk/mmap/healthy",
        "script": "io_bound",
        "args": ["--source", "disk", "--read", "mmap", "--healthy", "--seconds", "7"],
        "expect": "no io_bound",
    },
    # -- beyond the field guide: the batch's way from its worker to the main process ---------
    {
        "name": "slow_handover",
        "script": "slow_handover",
        "args": ["--seconds", "8"],
        "expect": "slow_handover",
        "checks": {
            "verdict": "slow_handover",
            "notice": True,
            # The main process's first full garbage collection copies ~35 MiB of each worker's
            # shared pages at once: one step, not a dataset copied as it is read.
            "absent": ["cow_memory_growth"],
            "findings": {
                "slow_handover": {
                    "severity": "critical",
                    "evidence": {
                        "handover_fraction": {">": 0.08},
                        # The batches were ready: the wait is the hand-over, not the workers.
                        "stall_beyond_handover_fraction": {"<": 0.05},
                        "handover_measured_batches": {">": 50},
                        "sharing_strategy": "file_descriptor",
                    },
                    "fix": {
                        "contains": ["set_sharing_strategy('file_system')", "fewer, larger tensors"]
                    },
                }
            },
        },
    },
    {
        "name": "slow_handover/healthy",
        "script": "slow_handover",
        "args": ["--healthy", "--seconds", "8"],
        "expect": "healthy",
        "checks": {"verdict": "healthy"},
    },
    {
        # The same bottleneck behind a step of torch ops on every core: the main process's own
        # threads queue for the cores, which is not the hand-over's (8 tensors a batch, ~4 ms).
        "name": "slow_handover/busy_step",
        "script": "slow_handover",
        "args": ["--busy-step", "--fields", "8", "--seconds", "8"],
        "expect": "slow_handover",
        "checks": {
            "verdict": "slow_handover",
            "findings": {
                "slow_handover": {
                    "severity": "critical",
                    "evidence": {
                        "handover_fraction": {">": 0.05},
                        "stall_beyond_handover_fraction": {"<": 0.05},
                    },
                }
            },
        },
    },
    {
        "name": "slow_handover/busy_step/healthy",
        "script": "slow_handover",
        "args": ["--busy-step", "--fields", "8", "--healthy", "--seconds", "8"],
        "expect": "healthy",
        "checks": {"verdict": "healthy", "absent": ["slow_handover"]},
    },
    {
        "name": "main_process_bound",
        "script": "main_process_bound",
        "args": ["--seconds", "7"],
        "expect": "main_process_bound",
        "severity": "info",
        "checks": {
            "verdict": "healthy",
            "ids": ["main_process_bound"],
            "findings": {"main_process_bound": {"severity": "info"}},
        },
    },
    {
        "name": "main_process_bound/healthy",
        "script": "main_process_bound",
        "args": ["--healthy", "--seconds", "7"],
        "expect": "healthy",
        "checks": {
            "verdict": "healthy",
            "ids": [],
            "report": {
                "loaders": {"len": 1},
                # The wait per batch is the queue hand-off alone.
                "loaders.0.data_stall_pct": {"<": 15},
            },
        },
    },
    # -- hangs: field guide cause 6 ----------------------------------------------------------
    {
        "name": "collate_deadlock",
        "script": "collate_deadlock",
        "args": ["--seconds", "30"],
        "doctor_args": HANG,
        "expect": "collate_deadlock",
        "checks": {
            "returncode": HANG_ABORT_RC,
            "verdict": "collate_deadlock",
            # Named within the budget: the stall's own measure (NAMED_IN_TIME), and the
            # whole run's wall time (which also pays for starting Python and torch twice).
            "wall_s": {"<": 30},
            "report": {"hang.snapshot.processes": {"nonempty": True}},
            "findings": {
                "collate_deadlock": {
                    "evidence": {
                        "frame": {"contains": "collate_with_stats"},
                        "wait": "lock",
                        "start_method": "fork",
                        "main_threads_at_fork": {">=": 2},
                        "main_thread_names_at_fork": {"contains": "stats-writer"},
                        **NAMED_IN_TIME,
                    },
                    "fix": {"contains": "spawn"},
                }
            },
        },
    },
    {
        "name": "collate_deadlock/healthy",
        "script": "collate_deadlock",
        "args": ["--healthy", "--seconds", "6"],
        "doctor_args": HANG,
        "expect": "healthy",
        "checks": {"verdict": "healthy", "report": {"hang": {"present": False}}},
    },
    worker_hang_entry(""),
    worker_hang_entry("pipe", syscall="read"),
    # The worker's main thread is stuck in C: its stack comes from the native dump.
    worker_hang_entry("native", top_frame={"contains": "decode_native"}, syscall="futex"),
    # Thousands of batches a second before the hang: their hand-outs are a sample, and the
    # batch the loop waits for is still exact (the ring's progress table, not the events).
    worker_hang_entry("", "--after", "3000", name="after_fast_batches", waiting_batch=3000),
    {
        "name": "worker_hang/native/healthy",
        "script": "worker_hang",
        "args": ["--on", "native", "--healthy", "--seconds", "4"],
        "doctor_args": HANG,
        "expect": "no worker_hang",
        "checks": {"report": {"hang": {"present": False}}},
    },
    # Two torchrun ranks: rank 1's worker waits forever, rank 0 then waits for rank 1 in the
    # all-reduce. The hang is rank 1's, rank 0 is named as waiting for it (no second hang),
    # and --on-hang abort ends the whole job: torchrun and both ranks.
    {
        "name": "worker_hang/ranks",
        "script": "worker_hang",
        "ranks": 2,
        "args": ["--ddp", "--seconds", "60"],
        "doctor_args": HANG,
        "expect": "worker_hang",
        "checks": {
            "returncode": HANG_ABORT_RC,
            "verdict": "worker_hang",
            "ids": ["worker_hang"],
            "findings": {
                "worker_hang": {
                    "rank": "1",
                    "evidence": {
                        "stage": "getitem",
                        "frame": {"contains": "__getitem__"},
                        "waiting_ranks": "0",
                        "waiting_rank_frames": {"startswith": "rank 0 (pid "},
                    },
                    "title": {"contains": ["rank 1 \u00b7 loader 1", "rank 0 waits for it"]},
                }
            },
            "wall_s": {"<": 50},  # ended at the hang, not at the job's own 60 s
        },
    },
    {
        "name": "worker_hang/healthy",
        "script": "worker_hang",
        "args": ["--healthy", "--seconds", "4"],
        "doctor_args": HANG,
        "expect": "no worker_hang",
        "checks": {"report": {"hang": {"present": False}}},
    },
    # -- failures: field guide cause 3, worker deaths, fd limits -----------------------------
    # 2 workers x prefetch 8 + 1 = 17 batches of 2 MiB in a 24 MiB /dev/shm: the job dies of
    # it, and its exit code passes through.
    {
        "name": "shm_exhausted",
        "script": "shm_exhausted",
        "args": ["--seconds", "5"],
        "doctor_args": QUIET,
        "expect": "shm_exhausted",
        "needs": {"shm_mib": SHM_MIB},
        "checks": {
            "returncode": 1,
            "verdict": "shm_exhausted",
            "findings": {
                "shm_exhausted": {
                    "severity": "critical",
                    "evidence": {
                        "failure": {"contains": "No space left on device"},
                        "shm_total_bytes": SHM_MIB * MIB,
                        "batch_bytes": 2 * MIB,
                        "batches_in_flight": 17,
                        "in_flight_bytes": 34 * MIB,
                        "fits_today": "prefetch_factor=2",
                    },
                    "relations": [
                        ("in_flight_bytes", ">", "shm_total_bytes"),
                        ("shm_size_needed_bytes", ">=", "in_flight_bytes"),
                    ],
                    # The size to set, for each place /dev/shm is configured, and today's
                    # setting that fits.
                    "fix": {
                        "contains": [
                            "--shm-size=1g",
                            "medium: Memory",
                            "sizeLimit: 1Gi",
                            "mount -o remount,size=1G /dev/shm",
                            "prefetch_factor=2",
                        ]
                    },
                }
            },
        },
    },
    # prefetch 4: 18 MiB of 24 in flight. It does not crash, is called out while it runs (no
    # -q), and is in the report.
    {
        "name": "shm_exhausted/tight",
        "script": "shm_exhausted",
        "args": ["--seconds", "5", "--tight"],
        "expect": "shm_exhausted",
        "needs": {"shm_mib": SHM_MIB},
        "checks": {
            "verdict": "healthy",
            "stderr": {"contains": "warning, shm_exhausted"},
            "findings": {
                "shm_exhausted": {
                    "severity": "warning",
                    "evidence": {
                        "in_flight_bytes": 18 * MIB,
                        "failure": {"present": False},
                        "fits_today": "prefetch_factor=2",
                    },
                    "relations": [
                        ("in_flight_bytes", "<=", "shm_free_bytes"),
                        ("shm_free_bytes", "<", "shm_size_needed_bytes"),
                    ],
                }
            },
        },
    },
    {
        "name": "shm_exhausted/sigbus",
        "script": "shm_exhausted",
        "args": ["--seconds", "5", "--sigbus"],
        "doctor_args": QUIET,
        "expect": "shm_exhausted",
        "needs": {"shm_mib": SHM_MIB},
        "checks": {
            "returncode": 1,
            "verdict": "shm_exhausted",
            "findings": {
                "shm_exhausted": {"evidence": {"failure": {"contains": "Bus error"}}},
                # The cause is named by shm_exhausted: the death is a warning beside it.
                "worker_died": {"severity": "warning", "evidence": {"signal_name": "SIGBUS"}},
            },
        },
    },
    # Two torchrun ranks on one node's 24 MiB /dev/shm, each keeping 2 x 3 + 1 = 7 batches of
    # 2 MiB (14 MiB) in flight: either fits alone (shm_exhausted/tight holds 18 MiB in the same
    # 24 MiB without failing), the two together (28 MiB) do not. The finding is the node's,
    # sized from both ranks, and names each one's share.
    {
        "name": "shm_exhausted/ranks",
        "script": "shm_exhausted",
        "ranks": 2,
        "args": ["--ddp", "--seconds", "8"],
        "doctor_args": QUIET,
        "expect": "shm_exhausted",
        "severity": "critical",
        "needs": {"shm_mib": SHM_MIB},
        "checks": {
            "returncode": 1,  # torchrun ends with its failed rank
            "verdict": "shm_exhausted",
            "findings": {
                "shm_exhausted": {
                    "severity": "critical",
                    "evidence": {
                        "failure": {"contains": "No space left on device"},
                        "shm_total_bytes": SHM_MIB * MIB,
                        "batch_bytes": 2 * MIB,
                        "batches_in_flight": 14,  # 7 per rank
                        "in_flight_bytes": 28 * MIB,
                        "ranks": 2,
                        "rank_in_flight_bytes": "rank 0: 14 MiB, rank 1: 14 MiB",
                        "fits_today": "prefetch_factor=1 in each rank's loader",
                    },
                    "relations": [("in_flight_bytes", ">", "shm_total_bytes")],
                    "title": {"contains": "/dev/shm (24 MiB) ran out"},
                    "why": {"contains": "rank 0: 14 MiB, rank 1: 14 MiB: 28 MiB together"},
                }
            },
            "report": {"loaders.0.rank": 0, "loaders.1.rank": 1},
        },
    },
    # prefetch 2: 10 MiB in flight, 2.4x room.
    {
        "name": "shm_exhausted/healthy",
        "script": "shm_exhausted",
        "args": ["--seconds", "5", "--healthy"],
        "doctor_args": QUIET,
        "expect": "no shm_exhausted",
        "needs": {"shm_mib": SHM_MIB},
        "checks": {"report": {"loaders.0.batches": {">": 20}}},
    },
    {
        "name": "worker_died",
        "script": "worker_died",
        "args": ["--seconds", "5"],
        "doctor_args": QUIET,
        "expect": "worker_died",
        "checks": {
            "returncode": 1,
            "verdict": "worker_died",
            "findings": {
                "worker_died": {
                    "evidence": {
                        "exit_code": 3,
                        "worker": 1,
                        "signal": {"present": False},
                        "reason": {"contains": "exit code 3"},
                        "stderr_tail": {"contains": ["fatal: shard", "is corrupt"]},
                        "message": {"contains": "exited unexpectedly"},
                    }
                }
            },
        },
    },
    {
        "name": "worker_died/healthy",
        "script": "worker_died",
        "args": ["--healthy", "--seconds", "3"],
        "doctor_args": QUIET,
        "expect": "no worker_died",
    },
    {
        "name": "worker_died/oom",
        "script": "worker_died",
        "args": ["--cause", "oom", "--seconds", "8"],
        "doctor_args": QUIET,
        "expect": "worker_died",
        "needs": {"memory_cgroup_mib": OOM_MIB},
        "checks": {
            "returncode": 1,
            "verdict": "worker_died",
            "findings": {
                "worker_died": {
                    "evidence": {
                        "signal_name": "SIGKILL",
                        "reason": {"startswith": "the OOM killer"},
                        "worker": 0,
                        "cgroup_oom_kills": {">=": 1},
                        "cgroup_memory_limit_bytes": OOM_MIB * MIB,
                    }
                }
            },
        },
    },
    {
        "name": "worker_died/oom/healthy",
        "script": "worker_died",
        "args": ["--cause", "oom", "--healthy", "--seconds", "3"],
        "doctor_args": QUIET,
        "expect": "no worker_died",
        "needs": {"memory_cgroup_mib": OOM_MIB},
        "checks": {"absent": ["ram_pressure"]},
    },
    # The job's own limit is 256; the loader's timeout (5 s) ends the wait for the lost batch.
    {
        "name": "fd_limit",
        "script": "fd_limit",
        "args": ["--seconds", "10"],
        "doctor_args": QUIET,
        "expect": "fd_limit",
        "checks": {
            "returncode": 1,
            "verdict": "fd_limit",
            "findings": {
                "fd_limit": {
                    "severity": "critical",
                    "evidence": {
                        "error": {"contains": "Too many open files"},
                        "nofile_soft": 256,  # the job's own limit, not the watcher's
                        "sharing_strategy": "file_descriptor",
                        "recommended_nofile": {">=": 8192},
                    },
                    "fix": {"contains": ["ulimit -n", "set_sharing_strategy('file_system')"]},
                }
            },
        },
    },
    # A child process of the job (a test suite's) lowers its own limit and runs out: the
    # limit quoted and the fix are that process's, not the job's own process's.
    {
        "name": "fd_limit/child",
        "script": "fd_limit",
        "args": ["--in-child", "--nofile", "200", "--seconds", "10"],
        "doctor_args": QUIET,
        "expect": "fd_limit",
        "checks": {
            "returncode": 1,
            "verdict": "fd_limit",
            "findings": {
                "fd_limit": {
                    "severity": "critical",
                    "title": {"contains": "RLIMIT_NOFILE 200"},
                    "evidence": {
                        "error": {"contains": "Too many open files"},
                        "nofile_soft": 200,
                        "process_pid": {">": 0},
                        "job_started_nofile_soft": {">": 200},
                    },
                    "fix": {"contains": ["Raise the limit where it is lowered", "ulimit -n"]},
                }
            },
        },
    },
    # Each worker lowers its own limit in worker_init_fn: the worker's limit is quoted.
    {
        "name": "fd_limit/worker",
        "script": "fd_limit",
        "args": ["--worker-nofile", "200", "--seconds", "10"],
        "doctor_args": QUIET,
        "expect": "fd_limit",
        "checks": {
            "returncode": 1,
            "verdict": "fd_limit",
            "findings": {
                "fd_limit": {
                    "title": {"contains": "RLIMIT_NOFILE 200"},
                    "evidence": {"nofile_soft": 200, "job_started_nofile_soft": {">": 200}},
                    "fix": {"contains": "Raise the limit where it is lowered"},
                }
            },
        },
    },
    # No loader timeout: the main process waits forever for the batch the worker dropped, and
    # the lost batch leads the hang it causes.
    {
        "name": "fd_limit/hang",
        "script": "fd_limit",
        "args": ["--seconds", "30", "--timeout", "0"],
        "doctor_args": QUIET + HANG,
        "expect": "fd_limit",
        "checks": {
            "returncode": HANG_ABORT_RC,
            "verdict": "fd_limit",
            "report": {"hang": {"present": True}},
            "findings": {
                "fd_limit": {
                    "evidence": {"batches_lost": {">=": 1}},
                    "why": {"contains": "The hang is its consequence"},
                }
            },
        },
    },
    {
        "name": "fd_limit/healthy",
        "script": "fd_limit",
        "args": ["--healthy", "--seconds", "4"],
        "doctor_args": QUIET,
        "expect": "no fd_limit",
        # Healthy, not only quiet: one tensor a batch (its 16 parts kept apart took ~4 ms
        # to hand over, a fifth of the loop: slow_handover's, the scenario of that name).
        "checks": {"verdict": "healthy", "report": {"loaders.0.batches": {">": 20}}},
    },
    # -- memory: field guide cause 5 ---------------------------------------------------------
    {
        "name": "ram_pressure",
        "script": "ram_pressure",
        "args": ["--seconds", "6"],
        "doctor_args": QUIET,
        "expect": "ram_pressure",
        "needs": {"memory_cgroup_mib": OOM_MIB},
        "checks": {
            "verdict": "healthy",
            "findings": {
                "ram_pressure": {
                    "severity": "warning",  # short of memory, not yet thrashing: a risk
                    "title": {"contains": "the memory cgroup at"},
                    "evidence": {
                        "cgroup_memory_limit_bytes": OOM_MIB * MIB,
                        "cgroup_headroom_fraction": {"<": 0.10},
                    },
                }
            },
        },
    },
    {
        "name": "ram_pressure/healthy",
        "script": "ram_pressure",
        "args": ["--healthy", "--seconds", "6"],
        "doctor_args": QUIET,
        "expect": "no ram_pressure",
        "needs": {"memory_cgroup_mib": OOM_MIB},
    },
    # Without an accelerator pin_memory=True does nothing: said once, as info.
    {
        "name": "pinned_memory_pressure",
        "script": "pinned_memory_pressure",
        "args": ["--seconds", "3"],  # over the 2 s of loop a "healthy" verdict needs
        "doctor_args": QUIET,
        "expect": "pinned_memory_pressure",
        "severity": "info",
        "needs": {"no_accelerator": True},
        "checks": {
            "verdict": "healthy",
            "ids": ["pinned_memory_pressure"],  # said once
            "findings": {"pinned_memory_pressure": {"severity": "info"}},
        },
    },
    {
        "name": "pinned_memory_pressure/healthy",
        "script": "pinned_memory_pressure",
        "args": ["--healthy", "--seconds", "3"],
        "doctor_args": QUIET,
        "expect": "no pinned_memory_pressure",
    },
    # -- a report on every path --------------------------------------------------------------
    # The dataset raises (issue 10): the job dies of the exception, its own exit code and
    # traceback untouched, and the report names it: type, message, worker, the batch's
    # samples, the frame, the batches before.
    {
        "name": "loader_error",
        "script": "loader_error",
        "args": ["--workers", "2"],
        "doctor_args": QUIET,
        "expect": "loader_error",
        "severity": "critical",
        "checks": {
            "returncode": 1,
            "verdict": "loader_error",
            "stderr": {"contains": "ValueError: bad sample 500"},
            "report": {"exit_code": 1, "loaders.0.batches": 31},
            "findings": {
                "loader_error": {
                    "severity": "critical",
                    "evidence": {
                        "exception": "ValueError: bad sample 500",
                        "stage": "__getitem__",
                        "worker": {">=": 0},
                        "worker_pid": {">": 0},
                        "raised_at": {"contains": "loader_error.py:", "lacks": "torch"},
                        "samples": "496-511",
                        "batch_index": 31,
                        "batches_before": 31,
                    },
                    "fix": {"contains": ["sample 500", "dataset[500]", "skip it"]},
                }
            },
        },
    },
    {
        "name": "loader_error/main_process",
        "script": "loader_error",
        "args": ["--workers", "0"],
        "doctor_args": QUIET,
        "expect": "loader_error",
        "severity": "critical",
        "checks": {
            "returncode": 1,
            "verdict": "loader_error",
            "findings": {
                "loader_error": {
                    "title": {"contains": "main process (num_workers=0)"},
                    "evidence": {
                        "worker": -1,
                        "raised_at": {"contains": "loader_error.py:"},
                        "samples": "496-511",
                        "batches_before": 31,
                    },
                }
            },
        },
    },
    {
        "name": "loader_error/spawn",
        "script": "loader_error",
        "args": ["--workers", "2", "--start-method", "spawn"],
        "doctor_args": QUIET,
        "expect": "loader_error",
        "severity": "critical",
        "timeout": 180,
        "checks": {
            "returncode": 1,
            "verdict": "loader_error",
            "findings": {
                "loader_error": {
                    "evidence": {"exception": "ValueError: bad sample 500", "samples": "496-511"}
                }
            },
        },
    },
    {
        "name": "loader_error/iterable",
        "script": "loader_error",
        "args": ["--iterable", "--workers", "1", "--start-method", "spawn"],
        "doctor_args": QUIET,
        "expect": "loader_error",
        "severity": "critical",
        "timeout": 180,
        "checks": {
            "returncode": 1,
            "verdict": "loader_error",
            "findings": {
                "loader_error": {
                    "evidence": {
                        "exception": "OSError: record 200: unexpected end of stream",
                        "stage": "__iter__",
                        "raised_at": {"contains": "loader_error.py:"},
                        "batch_index": 12,  # 200 records of 16 a batch: in the 13th
                        "samples": {"present": False},  # an IterableDataset has no indices
                    },
                    "fix": {"contains": "about 192 samples"},
                }
            },
        },
    },
    {
        "name": "loader_error/collate",
        "script": "loader_error",
        "args": ["--collate", "--workers", "1"],
        "doctor_args": QUIET,
        "expect": "loader_error",
        "severity": "critical",
        "checks": {
            "returncode": 1,
            "findings": {
                "loader_error": {
                    "evidence": {"stage": "collate_fn", "samples": "500-503"},
                    "fix": {"contains": "do not collate together"},
                }
            },
        },
    },
    # The training step raises: the job fails, not its loader (no loader_error), and a report.
    {
        "name": "loader_error/step_raises",
        "script": "loader_error",
        "args": ["--step-raises"],
        "doctor_args": QUIET,
        "expect": "no loader_error",
        "checks": {
            "returncode": 1,
            "stderr": {"contains": "ValueError: loss is NaN at step 30"},
            "report": {"exit_code": 1, "loaders.0.batches": {">=": 30}},
        },
    },
    # Half a second of loop is no evidence of health: the verdict is unknown, and says why.
    {
        "name": "loader_error/too_short",
        "script": "loader_error",
        "args": ["--healthy", "--seconds", "0.5"],
        "doctor_args": QUIET,
        "expect": "no loader_error",
        "checks": {
            "verdict": "unknown",
            "report": {"notes": {"contains": "too short to judge"}},
            "stderr": {"contains": "too short to judge"},
        },
    },
    {
        "name": "loader_error/healthy",
        "script": "loader_error",
        "args": ["--healthy", "--seconds", "3"],
        "doctor_args": QUIET,
        "expect": "no loader_error",
    },
    # -- beyond the field guide (issue 6) ----------------------------------------------------
    {
        "name": "thread_oversubscription",
        "script": "thread_oversubscription",
        "args": ["--seconds", "8"],
        "expect": "thread_oversubscription",
        "needs": TWO_CPUS,
        "checks": {
            "verdict": "thread_oversubscription",
            "notice": True,
            "findings": {
                "thread_oversubscription": {
                    # The slowdown signals: many threads per worker that want a CPU, and they queue.
                    "evidence": {
                        "active_threads_per_worker": {">=": 4},
                        "worker_run_queue_delay_pct": {">=": 100},
                        "torch_threads": 8,  # what __getitem__ set, reported from the worker
                        "thread_pools": {"contains": "OpenMP"},
                        "recommended_threads_per_worker": 1,
                    },
                    "fix": {"contains": ["torch.set_num_threads(1)", "OMP_NUM_THREADS=1"]},
                }
            },
        },
    },
    {
        "name": "thread_oversubscription/healthy",
        "script": "thread_oversubscription",
        "args": ["--healthy", "--seconds", "8"],
        "expect": "no thread_oversubscription",
        "needs": TWO_CPUS,
    },
    {
        "name": "thread_oversubscription/idle",
        "script": "thread_oversubscription",
        "args": ["--idle", "--seconds", "8"],
        "expect": "no thread_oversubscription",
        "needs": TWO_CPUS,
    },
    {
        "name": "thread_oversubscription/capped",
        "script": "thread_oversubscription",
        "args": ["--capped", "--seconds", "8"],
        "expect": "no thread_oversubscription",
    },
    {
        "name": "cow_memory_growth",
        "script": "cow_memory_growth",
        "args": ["--seconds", "12"],
        "expect": "cow_memory_growth",
        "checks": {
            "findings": {
                "cow_memory_growth": {
                    "evidence": {
                        "workers_growing": {">=": 1},
                        # Random reads of small strings copy about a page per sample read.
                        "private_dirty_mib_per_1000_samples": {">": 1},
                        "private_dirty_grown_mib": {">": 32},
                        "python_object_attributes": {
                            "startswith": "paths (list of 3000000 str",
                            "lacks": "labels",  # a numpy array: not a culprit
                        },
                    },
                    "fix": {"contains": ["dataset.paths", "numpy"]},
                }
            }
        },
    },
    {
        "name": "cow_memory_growth/healthy",
        "script": "cow_memory_growth",
        "args": ["--healthy", "--seconds", "12"],
        "expect": "no cow_memory_growth",
    },
    {
        "name": "worker_startup_cost",
        "script": "worker_startup_cost",
        "args": [],
        "expect": "worker_startup_cost",
        "timeout": 180,
        "checks": {
            "verdict": "worker_startup_cost",
            "findings": {
                "worker_startup_cost": {
                    "evidence": {
                        "restarts": 3,  # four epochs, the last three restart their workers
                        "startup_share": {">": 0.25},
                        "start_method": "spawn",
                        # the 100 MB array, measured in the hooks
                        "pickled_dataset_mib": {">": 99, "<": 102},
                    },
                    "fix": {"contains": ["persistent_workers=True", "lighter"]},
                }
            },
        },
    },
    # The one start-up of a heavy dataset under spawn may be noted, never as a warning. Ten
    # epochs: the first batches wait for the start-up, which is not loop time, and the four
    # epochs of the slow twin leave under a second of loop after it (too short to judge).
    {
        "name": "worker_startup_cost/healthy",
        "script": "worker_startup_cost",
        "args": ["--healthy", "--epochs", "10"],
        "expect": "healthy",
        "checks": {"verdict": "healthy"},
        "timeout": 180,
    },
    {
        "name": "straggler_worker",
        "script": "straggler_worker",
        "args": ["--seconds", "8"],
        "expect": "straggler_worker",
        "checks": {
            "verdict": "straggler_worker",
            "notice": True,
            "findings": {
                "straggler_worker": {
                    "evidence": {"head_of_line_wait_s": {">": 0.5}},
                    "relations": [("fetch_max_ms", ">", "fetch_p50_ms", 10)],
                    "fix": {"contains": "in_order=False"},
                }
            },
        },
    },
    {
        "name": "straggler_worker/healthy",
        "script": "straggler_worker",
        "args": ["--healthy", "--seconds", "8"],
        "expect": "no straggler_worker",
    },
    # -- an IterableDataset whose shards leave workers without data: one shard, three workers,
    # dealt as webdataset and Hugging Face datasets deal them; the same with each library.
    *uneven_worker_split_entries("own"),
    *uneven_worker_split_entries("hf"),
    *uneven_worker_split_entries("webdataset"),
    # Shards that do not divide evenly: 4 on 3 workers, one worker reads two. Epochs of ~5 s end
    # within the run; the loop keeps up while all three read and waits once two are done.
    {
        "name": "uneven_worker_split/uneven_sizes",
        "script": "uneven_worker_split",
        "args": ["--shards", "4", "--shard-samples", "200", "--seconds", "10"],
        "expect": "uneven_worker_split",
        "severity": "critical",
        "checks": {
            "verdict": "uneven_worker_split",
            "findings": {
                "uneven_worker_split": {
                    "evidence": {
                        "short_handed_wait_share": {">": 0.6},
                        "workers_without_data": 0,
                        "active_workers": {">": 2, "<": 2.8},
                    },
                }
            },
        },
    },
    {
        "name": "uneven_worker_split/uneven_sizes/healthy",
        "script": "uneven_worker_split",
        "args": ["--shards", "3", "--shard-samples", "200", "--seconds", "10"],
        "expect": "healthy",
        "checks": {"verdict": "healthy"},
    },
    # -- multi-rank jobs: torchrun --nproc-per-node 2, DDP over gloo on the CPU ---------------
    # Rank 1's samples cost 15 ms of CPU each, rank 0's nothing: rank 1 gates every step, and
    # rank 0 waits for it in the all-reduce. The verdict is rank 1's own cause.
    {
        "name": "straggler_rank",
        "script": "straggler_rank",
        "ranks": 2,
        "args": ["--seconds", "10"],
        "expect": "straggler_rank",
        "severity": "critical",
        "checks": {
            "verdict": "slow_getitem",
            "findings": {
                "straggler_rank": {
                    "rank": "1",
                    "evidence": {
                        "gating_rank": 1,
                        "cause": "slow_getitem",
                        "waiting_ranks": "0",
                        "others_lost_fraction": {">": 0.3},
                    },
                    "relations": [("others_wait_per_step_ms", ">", "wait_per_batch_ms", 0.5)],
                    # Only its shard is heavy: rebalance, and that rank's own fix.
                    "fix": {"contains": ["Rebalance the shards", "__getitem__"]},
                },
                "slow_getitem": {"rank": "1", "title": {"startswith": "Rank 1 \u00b7 loader 1:"}},
            },
            "absent": ["main_process_bound"],
            "report": {"loaders.0.rank": 0, "loaders.1.rank": 1, "loaders.1.local_rank": 1},
        },
    },
    {
        "name": "straggler_rank/healthy",
        "script": "straggler_rank",
        "ranks": 2,
        "args": ["--healthy", "--seconds", "8"],
        "expect": "healthy",
        "checks": {"report": {"loaders.0.rank": 0, "loaders.1.rank": 1, "loaders.0.world_size": 2}},
    },
]

NO_SCENARIO: dict[str, str] = {
    "pinned_memory_pressure": "the warning case (pinned batches locking RAM while memory runs "
    "short) needs an accelerator: without one torch pins nothing; the info case is the "
    "pinned_memory_pressure scenario",
    "cuda_oom": "needs a GPU: CUDA out of memory is raised by a CUDA device's allocator",
    "cuda_oom_risk": "needs a GPU: it reads the peak CUDA memory allocated against the "
    "device's total",
}


def by_name(name: str) -> dict:
    """The entry called `name`."""
    for e in SCENARIOS:
        if e["name"] == name:
            return e
    raise KeyError(f"no scenario {name!r} in the catalog")


# The scripts whose runs need the machine to themselves: another test's load beside them would
# change what they prove. With the entries that start ranks (many processes at once),
# tools/test runs them one at a time with no other test beside them; the rest wait (on
# sleeps, I/O, a hang, a fault) and run beside each other.
ALONE = {
    # The finding, or the twin's silence, is read from CPU shares, run-queue delay or rates.
    "too_many_workers",
    "main_process_bound",
    "thread_oversubscription",
    "slow_getitem",
    "slow_collate",
    "worker_startup_cost",
    "straggler_worker",
    "straggler_rank",
    "slow_handover",
    # Its twin's spawned workers must start and serve batches within 6 s: beside three other
    # tests they took the whole run to import torch.
    "collate_deadlock",
}


def runs_alone(entry: dict) -> bool:
    """Whether the entry's run needs the machine to itself (see ALONE), or its verdict must be
    "healthy": that needs the loop to keep up, and beside three other tests' load (a tune
    trial's workers, say) even a loader 16 batches ahead waits 15% of its loop for them."""
    return (
        entry["script"] in ALONE
        or entry.get("ranks", 0) > 0
        or entry.get("checks", {}).get("verdict") == "healthy"
    )


def is_twin(entry: dict) -> bool:
    """A healthy twin: expected to produce no warning or critical finding of any kind."""
    return entry["expect"] == "healthy" or entry["expect"].startswith("no ")


def absent_id(entry: dict) -> str | None:
    """The id a "no <id>" twin must not report at all."""
    return entry["expect"][3:] if entry["expect"].startswith("no ") else None
