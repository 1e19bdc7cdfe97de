"""worker_hang under the default --on-hang report: the diagnosis is printed and the JSON
written while the job is still stuck; the job is left running until it is ended from
outside (the catalog's entry aborts instead)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from doctor_run import catalog, scenario

pytestmark = pytest.mark.scenario


def test_on_hang_report_keeps_waiting_and_reports_on_interrupt(tmp_path):
    entry = catalog.by_name("worker_hang")
    out = tmp_path / "r.json"
    cmd = [
        sys.executable, "-m", "dldoctor", "run", "--json", str(out),
        "--hang-timeout", str(catalog.HANG_TIMEOUT_S),
        "--", *scenario(entry["script"], "--seconds", "60"),
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not out.exists():
            time.sleep(0.2)
        assert out.exists(), "no report written at the hang"
        assert proc.poll() is None, "the job must keep running under --on-hang report"
        assert json.loads(out.read_text())["verdict"] == entry["expect"]
        os.kill(proc.pid, signal.SIGINT)  # forwarded to the job; the report is written again
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert entry["expect"] in err
    assert json.loads(out.read_text())["exit_code"] not in (None, 0)
