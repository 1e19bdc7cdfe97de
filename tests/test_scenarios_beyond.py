"""Scenario tests beyond the field guide (issue 6): thread pools oversubscribed inside the
workers, copy-on-write growth, worker start-up paid every epoch, and stragglers, each a real
job under `dldoctor run` with a healthy twin that must not be diagnosed."""

from __future__ import annotations

import os

import pytest

from doctor_run import run_doctor, scenario

pytestmark = pytest.mark.scenario
SECONDS = "8"


def two_cpus() -> bool:
    return len(os.sched_getaffinity(0)) >= 2


@pytest.mark.skipif(not two_cpus(), reason="the scenario runs two workers on two CPUs")
def test_pools_raised_in_getitem_are_thread_oversubscription(tmp_path):
    r = run_doctor(scenario("thread_oversubscription", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "thread_oversubscription", r.report["findings"]
    f = r.finding("thread_oversubscription")
    ev = f["evidence"]
    # The slowdown signals: many threads per worker that want a CPU, and they queue.
    assert ev["active_threads_per_worker"] >= 4, ev
    assert ev["worker_run_queue_delay_pct"] >= 100, ev
    assert ev["torch_threads"] == 8  # what __getitem__ set, reported from the worker
    assert "OpenMP" in ev["thread_pools"], ev
    assert ev["recommended_threads_per_worker"] == 1
    assert "torch.set_num_threads(1)" in f["fix"]
    assert "OMP_NUM_THREADS=1" in f["fix"]


@pytest.mark.skipif(not two_cpus(), reason="the scenario runs two workers on two CPUs")
def test_pool_capped_at_one_thread_is_not_oversubscribed(tmp_path):
    r = run_doctor(scenario("thread_oversubscription", "--healthy", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert "thread_oversubscription" not in r.ids()
    assert r.loud() == [], r.report["findings"]


@pytest.mark.skipif(not two_cpus(), reason="the scenario runs two workers on two CPUs")
def test_large_idle_pool_is_not_oversubscribed(tmp_path):
    r = run_doctor(scenario("thread_oversubscription", "--idle", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert "thread_oversubscription" not in r.ids()
    assert r.loud() == [], r.report["findings"]


def test_python_list_read_by_forked_workers_is_cow_growth(tmp_path):
    r = run_doctor(scenario("cow_growth", "--seconds", "12"), tmp_path)
    assert r.returncode == 0, r.stderr
    f = r.finding("cow_memory_growth")
    assert f["severity"] in ("warning", "critical")
    ev = f["evidence"]
    assert ev["workers_growing"] >= 1
    # Random reads of small strings copy about a page per sample read.
    assert ev["private_dirty_mib_per_1000_samples"] > 1, ev
    assert ev["private_dirty_grown_mib"] > 32, ev
    assert ev["python_object_attributes"].startswith("paths (list of 3000000 str"), ev
    assert "labels" not in ev["python_object_attributes"]  # a numpy array: not a culprit
    assert "dataset.paths" in f["fix"] and "numpy" in f["fix"]


def test_same_data_in_a_numpy_array_is_not_cow_growth(tmp_path):
    r = run_doctor(scenario("cow_growth", "--healthy", "--seconds", "12"), tmp_path)
    assert r.returncode == 0, r.stderr
    assert "cow_memory_growth" not in r.ids()
    assert r.loud() == [], r.report["findings"]


def test_spawned_workers_restarted_every_epoch_are_startup_cost(tmp_path):
    r = run_doctor(scenario("startup_cost"), tmp_path, timeout=180)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "worker_startup_cost", r.report["findings"]
    f = r.finding("worker_startup_cost")
    ev = f["evidence"]
    assert ev["restarts"] == 3  # four epochs, the last three restart their workers
    assert ev["startup_share"] > 0.25, ev
    assert ev["start_method"] == "spawn"
    assert 99 < ev["pickled_dataset_mib"] < 102, ev  # the 100 MB array, measured in the hooks
    assert "persistent_workers=True" in f["fix"]
    assert "lighter" in f["fix"]


def test_persistent_workers_pay_startup_once(tmp_path):
    r = run_doctor(scenario("startup_cost", "--healthy"), tmp_path, timeout=180)
    assert r.returncode == 0, r.stderr
    assert r.loud() == [], r.report["findings"]
    # The one start-up of a heavy dataset under spawn may be noted, never as a warning.
    for f in r.report["findings"]:
        assert f["severity"] == "info"


def test_every_fiftieth_sample_slow_is_straggler(tmp_path):
    r = run_doctor(scenario("straggler", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "straggler_worker", r.report["findings"]
    f = r.finding("straggler_worker")
    ev = f["evidence"]
    assert ev["head_of_line_wait_s"] > 0.5, ev
    assert ev["fetch_max_ms"] > 10 * ev["fetch_p50_ms"], ev
    # The slow batches' samples, from the workers' side logs: each holds a multiple of 50.
    indices = [int(x) for x in ev["slow_sample_indices"].replace(", ...", "").split(", ")]
    batches = {i // 4 for i in indices}  # batch_size=4, sequential sampler
    assert batches and all(any(s % 50 == 0 for s in range(b * 4, b * 4 + 4)) for b in batches)
    assert "in_order=False" in f["fix"]


def test_uniform_samples_are_not_stragglers(tmp_path):
    r = run_doctor(scenario("straggler", "--healthy", "--seconds", SECONDS), tmp_path)
    assert r.returncode == 0, r.stderr
    assert "straggler_worker" not in r.ids()
    assert r.loud() == [], r.report["findings"]
