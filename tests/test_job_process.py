"""dldoctor.job.process: every hooked process registers the stack-dump signals (the hang
doctor sends it) and announces it in the side log; a dump leaves the job running."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from _hooked_job import hooked_job  # noqa: E402
from dldoctor import _ext  # noqa: E402
from dldoctor.job import process  # noqa: E402


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return hooked_job(tmp_path_factory)


def test_stack_signal_dumps_worker_and_main_stacks(job):
    wpid = job.result["stack"]["worker_pid"]
    worker_dump = (job.run_dir / f"stack-{wpid}.txt").read_text()
    assert "_worker_loop" in worker_dump
    main_dump = (job.run_dir / f"stack-{job.result['main_pid']}.txt").read_text()
    assert "scenario_stack" in main_dump
    assert job.result["stack"]["rest"] == 3  # the job went on after the dumps
    procs = {r["pid"]: r for r in job.side if r.get("type") == "process"}
    assert procs[wpid]["stack_signal"] == process.STACK_SIGNAL
    assert procs[wpid]["stack_signal_native"] == process.STACK_SIGNAL_NATIVE
    assert procs[wpid]["stack_safe_point"] is True


def test_the_capture_gets_a_workers_stacks_at_a_safe_point(job):
    got = job.result["stack"]
    assert got["note"] is None and got["native"] is False, got
    threads = _ext.parse_faulthandler(got["captured"])
    # Every thread of the worker (its queue feeder beside the loop), the loop's the current one.
    assert len(threads) >= 2, got["captured"]
    current = [t for t in threads if t["current"]]
    assert len(current) == 1
    assert "_worker_loop" in [f["function"] for f in current[0]["frames"]]
