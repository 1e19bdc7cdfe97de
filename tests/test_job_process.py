"""dldoctor.job.process: every hooked process registers the stack-dump signal (the hang
doctor sends it) and announces it in the side log; a dump leaves the job running."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")

from _hooked_job import hooked_job  # noqa: E402
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
