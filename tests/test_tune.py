"""`dldoctor tune`: real jobs run repeatedly with their DataLoader settings overridden. A job
whose samples each wait ~20 ms off-CPU is beaten within its budget; a trial that crashes is
reported as failed and excluded; bad input is one line."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# The trials' job waits on sleeps: it may run beside other such tests (tests/conftest.py).
pytestmark = pytest.mark.waits

# A loader whose __getitem__ waits 20 ms (a remote source answering), one worker, a loop
# that only steps a counter. With CRASH_FROM set, any worker with id >= CRASH_FROM kills
# itself with SIGSEGV in worker_init_fn: the job then fails as torch reports a dead worker.
JOB = """
import os, signal, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

CRASH_FROM = int(sys.argv[1])

class Remote(Dataset):
    def __len__(self):
        return 1_000_000
    def __getitem__(self, i):
        time.sleep(0.02)
        return torch.zeros(4)

def init(worker_id):
    if CRASH_FROM >= 0 and worker_id >= CRASH_FROM:
        os.kill(os.getpid(), signal.SIGSEGV)

loader = DataLoader(Remote(), batch_size=4, num_workers=1, worker_init_fn=init)
steps = 0
for x in loader:
    steps += 1
"""


def tune(tmp_path, crash_from: int, budget: float, timeout: float):
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(JOB))
    out = tmp_path / "tune.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "dldoctor",
            "tune",
            "--budget",
            str(budget),
            "--json",
            str(out),
            "--",
            sys.executable,
            str(job),
            str(crash_from),
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(out.read_text()), proc


def test_a_latency_bound_job_is_beaten_within_its_budget(tmp_path):
    r, proc = tune(tmp_path, crash_from=-1, budget=70, timeout=240)
    assert r["schema"] == 1 and r["kind"] == "tune"
    base = r["baseline"]
    assert base["settings"]["num_workers"] == 1
    # 1 worker waits 4 x 20 ms a batch: ~12.5 batches/s at best.
    assert 4 < base["batches_per_s"] < 14, base
    best = r["best"]
    assert best["loaders"][0]["settings"]["num_workers"] > 2, best
    assert r["speedup"] > 2.0, r
    assert best["batches_per_s"] > 2 * base["batches_per_s"]
    assert r["seconds"] <= 70 + 25  # the last trial may end up to its own grace past it
    for t in r["trials"]:
        assert t["outcome"] == "ok", t
        assert t["ci"] is not None and t["ci"] >= 0
    out = proc.stdout
    assert "in code:   DataLoader(..., num_workers=" in out
    assert "or run:    dldoctor run --set num_workers=" in out
    assert "of this machine's ceiling for this loader" in out or "ceiling" not in r


def test_a_crashing_trial_is_reported_as_failed_and_excluded(tmp_path):
    r, proc = tune(tmp_path, crash_from=1, budget=50, timeout=200)
    assert r["baseline"]["outcome"] == "ok"
    failed = [t for t in r["trials"] if t["outcome"] == "failed"]
    assert failed, r["trials"]
    for t in failed:
        assert t["settings"]["num_workers"] >= 2  # only trials with a worker id >= 1 crash
        assert t["batches_per_s"] is None
        assert t["reason"].startswith("the job failed"), t
    assert r["best"]["loaders"][0]["settings"]["num_workers"] <= 1
    assert "failed" in proc.stdout


def test_bad_input_is_one_line(tmp_path):
    for args, words in (
        ([], "no command given"),
        (["--budget", "5", "--", "true"], "--budget must be more than"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "dldoctor", "tune", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 2, proc.stderr
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and words in lines[0] and "Traceback" not in proc.stderr


def test_help_says_each_trial_runs_the_jobs_own_code():
    proc = subprocess.run(
        [sys.executable, "-m", "dldoctor", "tune", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    assert "runs the job's own code" in " ".join(proc.stdout.split())


def test_a_loop_waiting_on_hand_overs_is_not_read_as_io_bound():
    """Workers idle most of their fetch read as waiting on I/O (more of them tried first),
    unless the loop waits for batches they already made (slow_handover): then more workers only
    add hand-overs."""
    from types import SimpleNamespace

    from dldoctor.watcher.tune_trials import Trial, profile

    def report(*ids):
        return SimpleNamespace(
            verdict=ids[0] if ids else "healthy",
            loaders=[{"num_workers": 2, "batches": 500, "worker_on_cpu_fraction": 0.3}],
            system={"usable_cpus": 2},
            findings=[{"id": i, "severity": "critical", "evidence": {}} for i in ids],
        )

    base = Trial(settings={}, batches_per_s=20.0)
    assert profile(report("io_bound"), base)["off_cpu"] is True
    assert profile(report("straggler_worker"), base)["off_cpu"] is True
    assert profile(report("slow_handover"), base)["off_cpu"] is False
