"""Scenario tests for loaders that fail (field guide cause 3, worker deaths, fd limits): each
real fault must produce its finding with the figures and the fix, each healthy twin none; and
a report is written however the job ends (a crash, Ctrl-C)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from _faults import memory_limit_cgroup, namespace_cmd
from doctor_run import run_doctor, scenario

pytestmark = pytest.mark.scenario
MIB = 1 << 20
SHM_MIB = 24  # the /dev/shm tmpfs of the shm scenarios


def shm_run(tmp_path, *args, quiet=True):
    """shm_exhausted.py under `dldoctor run`, both inside a mount namespace whose /dev/shm is
    a 24 MiB tmpfs (the watcher's facts must see the same /dev/shm as the job)."""
    return run_doctor(
        scenario("shm_exhausted", "--seconds", "5", *args),
        tmp_path,
        ("-q",) if quiet else (),
        prefix=namespace_cmd([], shm_mib=SHM_MIB),
    )


# --- shm_exhausted ------------------------------------------------------------------------------


def test_batches_in_flight_past_dev_shm_are_critical_with_the_size_to_set(tmp_path):
    r = shm_run(tmp_path)  # 2 workers x prefetch 8 + 1 = 17 batches of 2 MiB
    assert r.returncode == 1, r.stderr  # the job dies of it; its exit code passes through
    assert r.report["verdict"] == "shm_exhausted", r.report["findings"]
    f = r.finding("shm_exhausted")
    assert f["severity"] == "critical"
    ev = f["evidence"]
    assert "No space left on device" in ev["failure"]
    assert ev["shm_total_bytes"] == SHM_MIB * MIB
    assert ev["batch_bytes"] == 2 * MIB
    assert ev["batches_in_flight"] == 17
    assert ev["in_flight_bytes"] == 34 * MIB > ev["shm_total_bytes"]
    assert ev["shm_size_needed_bytes"] >= ev["in_flight_bytes"]
    # The size to set, for each place /dev/shm is configured, and today's setting that fits.
    assert "--shm-size=1g" in f["fix"]
    assert "medium: Memory" in f["fix"] and "sizeLimit: 1Gi" in f["fix"]
    assert "mount -o remount,size=1G /dev/shm" in f["fix"]
    assert ev["fits_today"] == "prefetch_factor=2"
    assert "prefetch_factor=2" in f["fix"]


def test_same_loader_with_a_prefetch_that_fits_is_quiet(tmp_path):
    r = shm_run(tmp_path, "--healthy")  # prefetch 2: 10 MiB in flight, 2.4x room
    assert r.returncode == 0, r.stderr
    assert "shm_exhausted" not in r.ids(), r.report["findings"]
    assert r.report["loaders"][0]["batches"] > 20


def test_little_margin_is_a_warning_before_any_crash(tmp_path):
    r = shm_run(tmp_path, "--tight", quiet=False)  # prefetch 4: 18 MiB of 24 in flight
    assert r.returncode == 0, r.stderr  # it did not crash ...
    assert "warning, shm_exhausted" in r.stderr  # ... was called out while it ran ...
    f = r.finding("shm_exhausted")  # ... and in the report
    assert f["severity"] == "warning"
    assert r.report["verdict"] == "healthy"
    ev = f["evidence"]
    assert ev["in_flight_bytes"] == 18 * MIB
    assert ev["in_flight_bytes"] <= ev["shm_free_bytes"] < ev["shm_size_needed_bytes"]
    assert "failure" not in ev
    assert ev["fits_today"] == "prefetch_factor=2"


def test_worker_killed_by_sigbus_in_dev_shm_is_shm_exhausted(tmp_path):
    r = shm_run(tmp_path, "--sigbus")
    assert r.returncode == 1, r.stderr
    assert r.report["verdict"] == "shm_exhausted", r.report["findings"]
    assert "Bus error" in r.finding("shm_exhausted")["evidence"]["failure"]
    died = r.finding("worker_died")
    assert died["evidence"]["signal_name"] == "SIGBUS"
    assert died["severity"] == "warning"  # the cause is named by shm_exhausted


# --- worker_died --------------------------------------------------------------------------------


def test_worker_exit_code_with_its_last_words(tmp_path):
    r = run_doctor(scenario("worker_exit", "--seconds", "5"), tmp_path, ("-q",))
    assert r.returncode == 1, r.stderr
    assert r.report["verdict"] == "worker_died", r.report["findings"]
    f = r.finding("worker_died")
    ev = f["evidence"]
    assert ev["exit_code"] == 3
    assert ev["worker"] == 1
    assert "signal" not in ev
    assert "exit code 3" in ev["reason"]
    assert "fatal: shard" in ev["stderr_tail"] and "is corrupt" in ev["stderr_tail"]
    assert "exited unexpectedly" in ev["message"]


def test_worker_that_keeps_running_is_not_reported(tmp_path):
    r = run_doctor(scenario("worker_exit", "--healthy", "--seconds", "3"), tmp_path, ("-q",))
    assert r.returncode == 0, r.stderr
    assert "worker_died" not in r.ids()


def test_worker_killed_by_the_oom_killer(tmp_path):
    with memory_limit_cgroup(256 * MIB) as cg:
        r = run_doctor(
            scenario("worker_oom", "--seconds", "8", "--cgroup", cg.path), tmp_path, ("-q",)
        )
    assert r.returncode == 1, r.stderr
    assert r.report["verdict"] == "worker_died", r.report["findings"]
    ev = r.finding("worker_died")["evidence"]
    assert ev["signal_name"] == "SIGKILL"
    assert ev["reason"].startswith("the OOM killer")
    assert ev["worker"] == 0
    assert ev["cgroup_oom_kills"] >= 1
    assert ev["cgroup_memory_limit_bytes"] == 256 * MIB


def test_same_loader_without_the_growing_cache_lives(tmp_path):
    with memory_limit_cgroup(256 * MIB) as cg:
        r = run_doctor(
            scenario("worker_oom", "--healthy", "--seconds", "3", "--cgroup", cg.path),
            tmp_path,
            ("-q",),
        )
    assert r.returncode == 0, r.stderr
    assert "worker_died" not in r.ids()
    assert "ram_pressure" not in r.ids()


# --- fd_limit -----------------------------------------------------------------------------------


def test_too_many_open_files_under_a_low_nofile(tmp_path):
    r = run_doctor(scenario("fd_limit", "--seconds", "10"), tmp_path, ("-q",))
    assert r.returncode == 1, r.stderr  # the loader's timeout ends the wait for the lost batch
    assert r.report["verdict"] == "fd_limit", r.report["findings"]
    f = r.finding("fd_limit")
    ev = f["evidence"]
    assert f["severity"] == "critical"
    assert "Too many open files" in ev["error"]
    assert ev["nofile_soft"] == 256  # the job's own limit, not the watcher's
    assert ev["sharing_strategy"] == "file_descriptor"
    assert ev["recommended_nofile"] >= 8192
    assert "ulimit -n" in f["fix"] and "set_sharing_strategy('file_system')" in f["fix"]


def test_a_batch_lost_to_the_fd_limit_leads_the_hang_it_causes(tmp_path):
    # No loader timeout: the main process waits forever for the batch the worker dropped.
    r = run_doctor(
        scenario("fd_limit", "--seconds", "30", "--timeout", "0"),
        tmp_path,
        ("-q", "--hang-timeout", "3", "--on-hang", "abort"),
    )
    assert r.returncode == 124, r.stderr
    assert "hang" in r.report
    assert r.report["verdict"] == "fd_limit", r.report["findings"]
    f = r.finding("fd_limit")
    assert f["evidence"]["batches_lost"] >= 1
    assert "The hang is its consequence" in f["why"]


def test_same_samples_stacked_fit_the_same_limit(tmp_path):
    r = run_doctor(scenario("fd_limit", "--healthy", "--seconds", "3"), tmp_path, ("-q",))
    assert r.returncode == 0, r.stderr
    assert "fd_limit" not in r.ids(), r.report["findings"]
    assert r.report["loaders"][0]["batches"] > 20


# --- pin_memory without an accelerator ----------------------------------------------------------


def test_pin_memory_without_cuda_is_said_once_as_info(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: pin_memory=True is in effect here")
    r = run_doctor(
        scenario("crash", "--healthy", "--seconds", "2", "--pin-memory"), tmp_path, ("-q",)
    )
    assert r.returncode == 0, r.stderr
    f = r.finding("pinned_memory_pressure")
    assert f["severity"] == "info"
    assert r.report["verdict"] == "healthy"
    plain = run_doctor(scenario("crash", "--healthy", "--seconds", "2"), tmp_path, ("-q",))
    assert "pinned_memory_pressure" not in plain.ids()


# --- a report on every path ---------------------------------------------------------------------


def test_report_is_written_when_the_job_crashes(tmp_path):
    r = run_doctor(scenario("crash"), tmp_path, ("-q",))
    assert r.returncode == 1  # the script's own exit code
    assert "ValueError: loss is NaN at step 30" in r.stderr  # its traceback, untouched
    assert r.report is not None
    assert r.report["exit_code"] == 1
    assert r.report["loaders"] and r.report["loaders"][0]["batches"] >= 30
    assert "Traceback" not in r.stderr.split("ValueError: loss is NaN")[1]  # none of ours


def test_ctrl_c_is_forwarded_to_the_job_and_the_report_written(tmp_path):
    out = tmp_path / "r.json"
    cmd = [
        sys.executable, "-m", "dldoctor", "run", "-q", "--json", str(out),
        "--", *scenario("crash", "--forever"),
    ]  # fmt: skip
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True
    )
    try:
        line = proc.stdout.readline()  # the job prints "ready" once batches flow
        assert line.strip() == "ready", proc.stderr.read()
        os.kill(proc.pid, signal.SIGINT)  # Ctrl-C to dldoctor, as a terminal would send
        rc = proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert rc == 128 + signal.SIGINT, err  # the job died of the interrupt, as without dldoctor
    assert "KeyboardInterrupt" in err
    report = json.loads(out.read_text())
    assert report["exit_code"] == 128 + signal.SIGINT
    assert report["loaders"] and report["loaders"][0]["batches"] >= 20
    assert not [f["id"] for f in report["findings"] if f["severity"] != "info"]  # no failure
