"""Scenario tests: real jobs with real bottlenecks under `dldoctor run` (issue: field guide
causes 1, 2 and 4), each with a healthy twin that must not be diagnosed."""

from __future__ import annotations

import os

import pytest

from doctor_run import run_doctor, scenario

pytestmark = pytest.mark.scenario
SECONDS = "7"


def test_too_many_workers_is_named(tmp_path):
    r = run_doctor(scenario("too_many_workers", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "too_many_workers", r.stderr
    f = r.finding("too_many_workers")
    ev = f["evidence"]
    assert ev["total_workers"] == 6
    assert ev["usable_cpus"] == 1
    assert ev["run_queue_delay_pct"] > 50  # six busy workers share one core
    assert "num_workers=1" in f["fix"]


def test_one_worker_per_core_is_not_too_many(tmp_path):
    r = run_doctor(scenario("too_many_workers", "--healthy", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert "too_many_workers" not in r.ids()


def test_jpeg_decode_and_resize_is_slow_getitem(tmp_path):
    r = run_doctor(scenario("slow_getitem", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "slow_getitem", r.stderr
    f = r.finding("slow_getitem")
    ev = f["evidence"]
    assert ev["data_stall_fraction"] > 0.5
    assert ev["getitem_p50_ms"] > 5  # a 1600x1200 decode + resize per sample
    # The sampled profile names the hot step, in the evidence and in the fix.
    assert "decode_and_resize" in str(ev.get("hot_functions", "")) + f["fix"], f


def test_preresized_images_are_healthy(tmp_path):
    r = run_doctor(scenario("slow_getitem", "--healthy", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "healthy", r.report["findings"]
    assert r.loud() == []


def test_heavy_collate_is_slow_collate(tmp_path):
    r = run_doctor(scenario("slow_collate", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "slow_collate", r.stderr
    ev = r.finding("slow_collate")["evidence"]
    assert ev["collate_p50_ms"] > 20
    assert "slow_getitem" not in r.ids()


def test_default_collate_is_healthy(tmp_path):
    r = run_doctor(scenario("slow_collate", "--healthy", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "healthy", r.report["findings"]
    assert r.loud() == []


def test_slow_socket_source_is_io_bound(tmp_path):
    r = run_doctor(scenario("io_slow_source", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "io_bound", r.stderr
    f = r.finding("io_bound")
    assert f["evidence"]["worker_on_cpu_fraction"] < 0.3  # waiting, not computing
    assert "more workers than" in f["why"].lower() or "more workers than" in f["fix"].lower()


def test_fast_source_is_healthy(tmp_path):
    r = run_doctor(scenario("io_slow_source", "--healthy", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert "io_bound" not in r.ids()


def test_slow_waiting_consumer_is_healthy_and_quiet(tmp_path):
    r = run_doctor(scenario("slow_consumer", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "healthy"
    assert r.report["findings"] == []
    (loader,) = r.report["loaders"]
    assert loader["data_stall_pct"] < 15  # the wait per batch is the queue hand-off alone


def test_busy_consumer_is_main_process_bound_info(tmp_path):
    r = run_doctor(scenario("slow_consumer", "--busy", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "healthy"
    assert r.ids() == ["main_process_bound"]
    assert r.report["findings"][0]["severity"] == "info"


@pytest.mark.skipif(os.geteuid() != 0, reason="blkio throttling needs root")
def test_throttled_disk_is_io_bound(tmp_path):
    r = run_doctor(scenario("io_throttled_disk", "--seconds", SECONDS), tmp_path)
    if r.returncode == 77:
        pytest.skip(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else "not permitted")
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "io_bound", r.stderr
    ev = r.finding("io_bound")["evidence"]
    # The reads really went to the device (read_bytes), at about the throttled rate.
    assert 0 < ev["storage_read_mb_per_s"] < 8
