"""dldoctor.job.failures: a worker killed by a signal is reported by the main process with
its signal and pid, the loader's error passes through unchanged, and a dead worker's exit
status is read without reaping it behind PyTorch's back."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

import pytest

pytest.importorskip("torch")

from _hooked_job import events, hooked_job, loader_of  # noqa: E402
from dldoctor.job import events as K  # noqa: E402
from dldoctor.job import failures  # noqa: E402


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return hooked_job(tmp_path_factory)


def test_worker_killed_by_a_signal_is_reported(job):
    lid = loader_of(job, "Dies")
    (died,) = events(job, lid, K.K_WORKER_DIED)
    assert died.worker == 0 and died.v1 == 9 and died.v0 == -1
    (rec,) = [r for r in job.side if r.get("type") == "worker_died" and r["loader"] == lid]
    assert rec["signal_name"] == "SIGKILL" and rec["worker_pid"] == died.v2
    assert "DataLoader worker" in job.result["dies"] and str(died.v2) in job.result["dies"]
    (err,) = [r for r in job.side if r.get("type") == "loader_error" and r["loader"] == lid]
    assert err["exc_type"] == "builtins.RuntimeError"


def test_exit_status_of_dead_workers_without_reaping_them():
    # A worker that exits with a code is seen by PyTorch only after its 5 s poll when the
    # SIGCHLD lands on another thread, so this is checked on plain processes.
    ctx = mp.get_context("fork")
    exited = ctx.Process(target=os._exit, args=(3,))
    killed = ctx.Process(target=time.sleep, args=(60,))
    exited.start()
    killed.start()
    os.kill(killed.pid, signal.SIGKILL)
    for p in (exited, killed):  # wait for the exit without reaping (as PyTorch's handler)
        while os.waitid(os.P_PID, p.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None:
            time.sleep(0.01)
    assert failures.exit_status(exited) == (3, None)
    assert failures.exit_status(killed) == (None, signal.SIGKILL)
    assert exited.exitcode == 3 and killed.exitcode == -signal.SIGKILL  # still reapable
    assert failures.exit_status(exited) == (3, None)  # from multiprocessing's record now
