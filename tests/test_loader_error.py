"""A report on every path: the loader_error scenario's twin raising in its training step (checks
beyond the catalog entry's, on the same run), and interrupted with Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from doctor_run import catalog, run_entry, scenario

pytestmark = pytest.mark.scenario


def test_the_jobs_traceback_is_untouched_and_none_of_ours(tmp_path):
    r = run_entry(catalog.by_name("loader_error/step_raises"), tmp_path)
    assert r.returncode == 1  # the script's own exit code
    assert "Traceback" not in r.stderr.split("ValueError: loss is NaN")[1]  # none of ours


def test_ctrl_c_is_forwarded_to_the_job_and_the_report_written(tmp_path):
    out = tmp_path / "r.json"
    cmd = [
        sys.executable, "-m", "dldoctor", "run", "-q", "--json", str(out),
        "--", *scenario("loader_error", "--forever"),
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
