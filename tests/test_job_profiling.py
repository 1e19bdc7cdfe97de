"""dldoctor.job.profiling: one sampled profile of a worker's fetch names the user's hot
function with its file and line (none of dldoctor's frames), a loader's schedule spaces its
profiles in time across all its workers, and a process gives way to the user's own
profiler."""

from __future__ import annotations

import sys

import pytest

pytest.importorskip("torch")

from _hooked_job import JOB, events, hooked_job, loader_of  # noqa: E402
from dldoctor.job import events as K  # noqa: E402
from dldoctor.job import profiling  # noqa: E402


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return hooked_job(tmp_path_factory)


def test_sampled_profile_names_the_hot_function(job):
    lid = loader_of(job, "Profiled")
    batches = events(job, lid, K.K_WORKER_BATCH)
    profiled = [e for e in batches if e.flags & K.B_PROFILED]
    assert [e.index for e in profiled] == [profiling.PROFILE_FIRST - 1]
    (rec,) = [r for r in job.side if r.get("type") == "profile" and r["loader"] == lid]
    names = [f["name"] for f in rec["functions"]]
    assert any(n.endswith("decode_marker") for n in names), names
    hot = next(f for f in rec["functions"] if f["name"].endswith("decode_marker"))
    line = JOB.splitlines().index("def decode_marker(i):") + 1
    assert hot["calls"] == 1 and hot["cumulative_ms"] > 0
    assert hot["location"].endswith(f"job.py:{line}")
    assert all("dldoctor" not in f["location"] for f in rec["functions"])
    assert rec["epoch"] == 1 and rec["index"] == profiling.PROFILE_FIRST - 1


def test_a_loaders_profiles_are_spaced_across_its_workers_and_epochs(job):
    # Six epochs, two new workers each, every worker past its first profile candidate: a
    # schedule of each process's own would profile all twelve. The loader's one schedule
    # allows a profile at once, then PROFILE_MIN_INTERVAL_S later, the spacing doubling.
    assert job.result["reforked"] == [64] * 6  # 32 fetches a worker
    lid = loader_of(job, "Reforked")
    recs = [r for r in job.side if r.get("type") == "profile" and r["loader"] == lid]
    elapsed, allowed, gap = job.result["reforked_s"], 1, profiling.PROFILE_MIN_INTERVAL_S
    while gap <= elapsed:
        allowed += 1
        gap += profiling.PROFILE_MIN_INTERVAL_S * 2 ** (allowed - 1)
    assert 1 <= len(recs) <= allowed < 12, (len(recs), elapsed)
    profiled = [e for e in events(job, lid, K.K_WORKER_BATCH) if e.flags & K.B_PROFILED]
    assert len(profiled) == len(recs)


def test_the_process_gives_way_to_the_users_profiler():
    s = profiling.ProfileSchedule()
    assert s.due()
    sys.setprofile(lambda *a: None)
    try:
        assert not s.due()
    finally:
        sys.setprofile(None)
    s.off = True  # another tool owns the profiler hook
    assert not s.due()
    s.reset()
    assert s.due()


def test_the_profiler_is_loaded_before_any_worker_forks():
    # Loaded by a forked worker at its first profile, it took ~6 ms of that worker's CPU.
    assert profiling._lsprof is not None and sys.modules.get("_lsprof") is profiling._lsprof
