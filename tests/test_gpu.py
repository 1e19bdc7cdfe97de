"""The GPU side without a GPU. Three kinds of test, named for what they rest on:

- `live_without_driver`: real runs on this machine, which has no NVIDIA driver: "GPU not
  measured" everywhere (check, findings, report, HTML), never an error and never a 0.
- `stand_in`: real runs with $DLDOCTOR_NVML_LIBRARY pointing at tests/cpp/support/
  fake_nvml.cpp compiled here: a library with NVML's entry points answering fixed figures.
  It proves the path from the sampler to every report; it is not a GPU and proves nothing
  about NVML's ABI on a real driver (bench/gpu_check.py does, on one).
- `synthetic`: the renderers on report data written here in the shape the monitor gives.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from dldoctor import _ext
from dldoctor.preflight import checks as _checks
from dldoctor.report import Report
from dldoctor.reporters import chrome_trace, html, live
from doctor_run import run_doctor, scenario

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAKE_NVML_SRC = os.path.join(ROOT, "tests", "cpp", "support", "fake_nvml.cpp")
CHECK = [sys.executable, "-m", "dldoctor", "check", "--no-cuda", "--json", "-"]
GIB = 1 << 30
NO_DRIVER = "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)"
# The runs are slow_getitem jobs, named from their workers' CPU time: nothing beside them
# (tests/conftest.py).
pytestmark = pytest.mark.alone

without_driver = pytest.mark.skipif(
    _ext.collect_facts()["gpu"]["measured"] or bool(os.environ.get("DLDOCTOR_NVML_LIBRARY")),
    reason="an NVIDIA driver (or DLDOCTOR_NVML_LIBRARY) is here: bench/gpu_check.py's case",
)


@pytest.fixture(scope="module")
def fake_nvml(tmp_path_factory) -> str:
    """The stand-in NVML library, compiled for this test run."""
    cxx = shutil.which("c++") or shutil.which("g++")
    if cxx is None:
        pytest.skip("no C++ compiler to build the stand-in NVML library")
    out = str(tmp_path_factory.mktemp("nvml") / "libfake_nvml.so")
    subprocess.run(
        [cxx, "-shared", "-fPIC", "-O1", "-std=c++17", "-o", out, FAKE_NVML_SRC],
        check=True,
        capture_output=True,
    )
    return out


def stand_in_env(lib: str, **figures: str) -> dict:
    env = dict(os.environ, DLDOCTOR_NVML_LIBRARY=lib)
    env.update({f"FAKE_NVML_{k.upper()}": v for k, v in figures.items()})
    return env


def check_doc(env=None) -> dict:
    r = subprocess.run(CHECK, capture_output=True, text=True, timeout=60, env=env)
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def by_id(doc: dict) -> dict:
    return {c["id"]: c for c in doc["checks"]}


# --- live, without a driver ---------------------------------------------------------------------


@without_driver
def test_live_without_driver_check_says_gpu_not_measured():
    doc = check_doc()
    c = by_id(doc)["gpu"]
    assert c["status"] == "unknown"
    assert c["message"] == f"GPU not measured: {NO_DRIVER}"
    assert c["value"] is None  # unknown, not 0 GPUs
    assert doc["facts"]["gpu"] == {
        "measured": False,
        "not_measured": NO_DRIVER,
        "driver_version": "",
        "devices": [],
        "device_errors": [],
    }
    assert "cuda" in by_id(doc)  # torch's own check stays


@pytest.fixture(scope="module")
def run_without_driver(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nodriver")
    page, trace = str(tmp / "r.html"), str(tmp / "r.trace.json")
    r = run_doctor(
        scenario("slow_getitem", "--seconds", "5"), tmp, ("--html", page, "--trace", trace)
    )
    return r, page, trace


@without_driver
def test_live_without_driver_run_says_not_measured_everywhere(run_without_driver):
    r, page, trace = run_without_driver
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    f = r.finding("slow_getitem")
    assert f["evidence"]["gpu_idle"] == f"GPU not measured: {NO_DRIVER}"
    assert "gpu_idle_fraction" not in f["evidence"]  # no figure, not a 0
    assert r.report["series"]["gpus"] == []
    assert r.report["series"]["gpu_not_measured"] == NO_DRIVER
    assert r.report["system"]["facts"]["gpu"]["measured"] is False
    with open(page, encoding="utf-8") as fh:
        text = fh.read()
    assert f"GPU ({NO_DRIVER})" in text  # under "Not measured in this run"
    assert 'id="chart-gpu"' not in text
    with open(trace) as fh:
        doc = json.load(fh)
    assert not [e for e in doc["traceEvents"] if e.get("pid") == chrome_trace.GPU_PID]


# --- stand-in NVML library ----------------------------------------------------------------------


def test_stand_in_check_lists_the_gpus(fake_nvml):
    doc = check_doc(stand_in_env(fake_nvml, devices="2", util="25,90", used_mib="15000"))
    c = by_id(doc)["gpu"]
    assert c["status"] == "warn"  # 15000 of 16384 MiB used: almost full before training
    assert c["value"] == 2
    assert c["message"].startswith("2 GPUs through NVML (driver 999.99.fake): GPU 0 Fake GPU 0 ")
    assert "a kernel running 90% of the time" in c["message"]
    assert "CUDA_VISIBLE_DEVICES" in c["fix"]
    init = check_doc(stand_in_env(fake_nvml, init="9"))
    assert by_id(init)["gpu"]["message"] == "GPU not measured: nvmlInit_v2: Driver Not Loaded"


@pytest.fixture(scope="module")
def stand_in_run(fake_nvml, tmp_path_factory):
    """slow_getitem under `dldoctor run`, with the stand-in reporting the job's main process
    (the watcher's child) on GPU 0 with 512 MiB, a kernel running 25% of the time."""
    tmp = tmp_path_factory.mktemp("standin")
    page, trace = str(tmp / "r.html"), str(tmp / "r.trace.json")
    env = stand_in_env(fake_nvml, devices="2", util="25,70", pids="children", proc_mib="512")
    r = run_doctor(
        scenario("slow_getitem", "--seconds", "5"),
        tmp,
        ("--html", page, "--trace", trace),
        env=env,
    )
    assert r.returncode == 0, r.stderr
    return r, page, trace


def test_stand_in_run_puts_the_gpu_idle_share_in_the_finding(stand_in_run):
    r, _, _ = stand_in_run
    ev = r.finding("slow_getitem")["evidence"]
    # GPU 1 (70%) is not the job's: only GPU 0 counts.
    assert ev["gpu_idle_fraction"] == pytest.approx(0.75)
    assert ev["gpu_utilization_pct"] == pytest.approx(25.0)
    assert ev["gpu_idle"].startswith("the GPU ran no kernel 75% of the loop while the main")
    assert "not how busy the GPU was" in ev["gpu_idle"]
    gpus = r.report["system"]["facts"]["gpu"]["devices"]
    assert [g["name"] for g in gpus] == ["Fake GPU 0", "Fake GPU 1"]


def test_stand_in_run_keeps_a_gpu_series(stand_in_run):
    r, _, _ = stand_in_run
    s = r.report["series"]
    n = len(s["t_s"])
    assert s["gpu_not_measured"] == ""
    assert [g["index"] for g in s["gpus"]] == [0, 1]
    g0, g1 = s["gpus"]
    assert g0["job"] is True and g1["job"] is False
    assert len(g0["utilization_pct"]) == n
    known = [v for v in g0["utilization_pct"] if v is not None]
    assert known and all(v == 25 for v in known)
    # The report keeps four significant digits of each point (report.series_section).
    assert max(v for v in g0["job_memory_bytes"] if v is not None) == pytest.approx(512 << 20, 1e-3)
    assert g0["memory_total_bytes"] == 16384 << 20


def test_stand_in_run_draws_the_gpu_in_the_html_and_the_trace(stand_in_run):
    r, page, trace = stand_in_run
    with open(page, encoding="utf-8") as fh:
        text = fh.read()
    assert 'id="chart-gpu"' in text and 'id="chart-gpu-memory"' in text
    assert "not how busy it was" in text
    assert "GPU (" not in text.split("Not measured in this run", 1)[-1][:200]
    with open(trace) as fh:
        doc = json.load(fh)
    counters = [e for e in doc["traceEvents"] if e.get("pid") == chrome_trace.GPU_PID]
    names = {e["name"] for e in counters if e["ph"] == "C"}
    assert names == {
        "GPU 0: kernel running (% of time)",
        "GPU 0: memory (MiB)",
        "GPU 1: kernel running (% of time)",
        "GPU 1: memory (MiB)",
    }
    util = [e for e in counters if e["name"] == "GPU 0: kernel running (% of time)"]
    assert all(e["args"]["utilization"] == 25 for e in util)
    ts = [e["ts"] for e in util]
    assert ts == sorted(ts) and len(ts) > 10
    assert any(
        e["ph"] == "M" and e["args"].get("name") == "GPUs (NVML)" for e in doc["traceEvents"]
    )


@pytest.mark.skipif(shutil.which("tmux") is None, reason="no tmux (tools/install installs it)")
def test_stand_in_live_view_shows_a_gpu_line(fake_nvml, tmp_path):
    from test_live import Tmux

    t = Tmux(tmp_path)
    try:
        done = str(tmp_path / "done")
        env = f"DLDOCTOR_NVML_LIBRARY={shlex.quote(fake_nvml)} FAKE_NVML_PIDS=children"
        job = scenario("slow_getitem", "--healthy", "--seconds", "6")
        cmd = [sys.executable, "-m", "dldoctor", "run", "--live", "-q", "--", *job]
        t.type(f"env {env} {shlex.join(cmd)}; echo exit=$? > {done}")
        end = time.monotonic() + 60
        seen = ""
        while time.monotonic() < end:
            seen = t.screen()
            if "kernel time" in seen:
                break
            time.sleep(0.3)
        assert "GPU 0" in seen and "37% kernel time" in seen and "(job 512.0 MiB)" in seen, seen
        assert t.wait_file(done, 60)
    finally:
        t.close()


# --- synthetic report data: the renderers -------------------------------------------------------


def synthetic_report(gpus: list, not_measured: str = "") -> Report:
    """A report whose series has the monitor's shape (series_to_dict), written here."""
    t = [0.25 + 0.5 * i for i in range(8)]
    return Report(
        verdict="slow_getitem",
        series={
            "t0_ns": 0,
            "interval_s": 0.5,
            "t_s": t,
            "loaders": [
                {
                    "loader": 0,
                    "batches": 40,
                    "batches_per_s": [5.0] * 8,
                    "data_stall_pct": [70.0] * 8,
                }
            ],
            "processes": [],
            "machine": {},
            "gpus": gpus,
            "gpu_not_measured": not_measured,
        },
    )


def gpu_series(index: int, util: float, job: bool) -> dict:
    return {
        "index": index,
        "job": job,
        "utilization_pct": [util] * 8,
        "memory_used_bytes": [20.0 * GIB] * 8,
        "job_memory_bytes": [19.0 * GIB if job else 0.0] * 8,
        "memory_total_bytes": 80 * GIB,
    }


def test_synthetic_html_draws_the_gpu_beside_the_stall():
    page = html.render(synthetic_report([gpu_series(0, 30.0, True), gpu_series(1, 95.0, False)]))
    assert 'id="chart-gpu"' in page and 'id="chart-gpu-memory"' in page
    assert "GPU 0: a kernel running" in page and "GPU 1: a kernel running (not the job" in page
    assert "loader 0: data stall" in page
    none = html.render(synthetic_report([], "nvmlInit_v2: Driver Not Loaded"))
    assert 'id="chart-gpu"' not in none
    assert "GPU (nvmlInit_v2: Driver Not Loaded)" in none


def test_synthetic_trace_has_gpu_counter_tracks():
    trace = {
        "events": [],
        "machine": [],
        "processes": [],
        "gpus": [(2_000, 0, 40.0, 2 * GIB, GIB), (1_000, 0, None, None, None)],
    }
    doc = chrome_trace.build(trace)
    counters = [e for e in doc["traceEvents"] if e["ph"] == "C"]
    assert [e["name"] for e in counters] == [
        "GPU 0: kernel running (% of time)",
        "GPU 0: memory (MiB)",
    ]
    assert counters[0]["args"] == {"utilization": 40.0}
    assert counters[1]["args"] == {"used": 2048.0, "job": 1024.0}
    assert counters[0]["ts"] == 2.0  # an unknown pass adds nothing, not a 0


class _Watcher:
    facts: dict = {}

    def __init__(self, fig: dict):
        self.monitor = type("M", (), {"live": lambda _self: fig, "hangs": 0})()

    def streaming_verdict(self):
        return "healthy", None


def _render(fig: dict) -> str:
    from rich.console import Console

    out = io.StringIO()
    view = live.LiveView(_Watcher(fig), ["python", "train.py"], Console(file=out, width=120))
    Console(file=out, width=120).print(view._machine(fig))
    return out.getvalue()


def test_synthetic_live_view_has_a_gpu_line_or_says_why_not():
    fig = {
        "machine": {},
        "gpus": [
            {
                "index": 0,
                "job": True,
                "utilization_pct": 34.0,
                "memory_used_bytes": 12 * GIB,
                "memory_total_bytes": 80 * GIB,
                "job_memory_bytes": int(11.5 * GIB),
            }
        ],
        "gpu_not_measured": "",
    }
    text = _render(fig)
    assert "GPU 0" in text and "34% kernel time" in text
    assert "mem 12.0 GiB of 80.0 GiB (job 11.5 GiB)" in text
    text = _render({"machine": {}, "gpus": [], "gpu_not_measured": NO_DRIVER})
    assert f"not measured: {NO_DRIVER}" in text


def test_check_gpu_on_facts_of_each_kind():
    assert _checks.check_gpu({}).status == "unknown"
    none = _checks.check_gpu({"gpu": {"measured": True, "devices": [], "driver_version": "580"}})
    assert (none.status, none.value, none.message) == ("ok", 0, "NVML (driver 580) lists no GPU")
    dev = {"index": 0, "name": "NVIDIA H200", "memory_total_bytes": 140 * GIB}
    mig = _checks.check_gpu(
        {"gpu": {"measured": True, "devices": [dict(dev, memory_used_bytes=GIB)]}}
    )
    assert mig.status == "ok" and "kernel" not in mig.message  # utilization refused: not said
    assert mig.message == "1 GPU through NVML: GPU 0 NVIDIA H200 140.0 GiB, 1.0 GiB used"
