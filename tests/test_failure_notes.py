"""The failure notes' plumbing without a failing job: side-log records as the hooks write them
go through the watcher's translation and the real C++ monitor into findings; the memory
cgroup reader on this machine's own cgroup; a worker's stderr copy."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from dldoctor import _ext
from dldoctor.job import failures as _failure_hooks
from dldoctor.job import memcg as _memcg
from dldoctor.watcher import failure_notes as _failure_notes

MIB = 1 << 20
GIB = 1 << 30


@pytest.fixture
def monitor(tmp_path):
    return _ext.Monitor(str(tmp_path / "ring"), 1024, 0.1, run_dir=str(tmp_path))


def ids(monitor):
    return [f["id"] for f in monitor.findings(True)]


def test_a_death_record_becomes_worker_died_with_the_oom_killer(monitor, tmp_path):
    notes = _failure_notes.FailureNotes(monitor, str(tmp_path))
    base = {"path": "/cg", "version": 1, "limit_bytes": 256 * MIB, "oom_kill": 4}
    notes.on_record({"type": "iter_start", "loader": 1, "main_pid": 10, "memcg": base, "t_ns": 1})
    notes.on_record(
        {
            "type": "worker_died",
            "loader": 1,
            "worker": 0,
            "worker_pid": 11,
            "exitcode": None,
            "signal": 9,
            "message": "DataLoader worker (pid 11) is killed by signal: Killed.",
            "memcg": dict(base, oom_kill=5, usage_bytes=10 * MIB, peak_bytes=256 * MIB),
            "t_ns": 2,
        }
    )
    (f,) = monitor.findings(True)
    assert f["id"] == "worker_died" and f["severity"] == "critical"
    assert f["evidence"]["reason"] == "the OOM killer"
    assert f["evidence"]["cgroup_oom_kills"] == 1  # the rise since the iterator started


def test_error_records_by_source(monitor, tmp_path):
    notes = _failure_notes.FailureNotes(monitor, str(tmp_path))
    notes.on_record(
        {
            "type": "queue_feeder_error",
            "loader": 1,
            "worker": 0,
            "exc_type": "builtins.RuntimeError",
            "message": "unable to open shared memory object </torch_1_2_3> in read-write mode: "
            "Too many open files (24)",
            "t_ns": 5,
        }
    )
    notes.on_record({"type": "worker_exception", "message": "ValueError: bad sample", "t_ns": 6})
    (f,) = monitor.findings(True)
    assert f["id"] == "fd_limit"
    assert f["evidence"]["batches_lost"] == 1


def test_cuda_notes_become_oom_risk_and_oom(monitor, tmp_path):
    notes = _failure_notes.FailureNotes(monitor, str(tmp_path))
    monitor.note_failure(
        {
            "kind": "cuda_memory",
            "loader": 1,
            "batch_size": 64,
            "peak_bytes": 15 * GIB,
            "allocated_bytes": 3 * GIB,
            "total_bytes": 16 * GIB,
            "t_ns": 1,
        }
    )
    (risk,) = monitor.findings(True)
    assert risk["id"] == "cuda_oom_risk"
    assert risk["evidence"]["largest_batch_size_that_fits"] == 60  # (14.4 - 3) / (12 / 64)
    notes.on_record(
        {
            "type": "uncaught_exception",
            "exc_type": "torch.OutOfMemoryError",
            "message": "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 16.00 GiB of which 100.00 MiB is free.",
            "t_ns": 2,
        }
    )
    (oom,) = monitor.findings(True)
    assert oom["id"] == "cuda_oom" and oom["severity"] == "critical"
    assert oom["evidence"]["tried_to_allocate_bytes"] == 2 * GIB


def test_bad_notes_are_one_line_errors(monitor):
    with pytest.raises(Exception, match="unknown kind"):
        monitor.note_failure({"kind": "nonsense"})
    with pytest.raises(Exception, match="must be an integer"):
        monitor.note_failure({"kind": "death", "pid": "eleven"})
    with pytest.raises(Exception, match="must be a dict"):
        monitor.note_failure(["death"])


def test_memory_cgroup_of_this_process():
    m = _memcg.read()
    if m is None:
        pytest.skip("no memory cgroup readable here")
    assert os.path.isdir(m["path"])
    assert m["version"] in (1, 2)
    assert m["usage_bytes"] is None or m["usage_bytes"] >= 0
    assert m["oom_kill"] is None or m["oom_kill"] >= 0
    assert m["limit_bytes"] is None or m["limit_bytes"] > 0
    kills = _memcg.machine_oom_kills()
    assert kills is None or kills >= 0


def test_worker_stderr_copy_keeps_the_tail_and_passes_everything_on(tmp_path):
    code = textwrap.dedent(
        f"""
        import sys
        from dldoctor.job import failures as _failure_hooks
        _failure_hooks.worker_started({str(tmp_path)!r}, 1, 0)
        for i in range(2000):
            print("line", i, file=sys.stderr)
        print("last words", file=sys.stderr)
        """
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("\n") == 2001  # the real stderr got every line
    tail = _failure_hooks.stderr_tail(str(tmp_path), proc_pid(tmp_path))
    assert tail.endswith("last words\n")
    assert len(tail) <= 4000 and "line 1999" in tail


def proc_pid(tmp_path) -> int:
    (name,) = [n for n in os.listdir(tmp_path) if n.startswith("stderr-")]
    return int(name[len("stderr-") : -len(".txt")])
