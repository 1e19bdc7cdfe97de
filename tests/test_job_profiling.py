"""dldoctor.job.profiling: one sampled profile of a worker's fetch names the user's hot
function with its file and line (none of dldoctor's frames), and the schedule spaces the
profiles in time and gives way to the user's own profiler."""

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


def test_the_schedule_spaces_profiles_and_yields_to_the_users_profiler():
    s = profiling.ProfileSchedule()
    t = 10**12
    assert s.due(t)
    assert not s.due(t + 1)  # spaced: at least PROFILE_MIN_INTERVAL_S
    assert s.due(t + int(profiling.PROFILE_MIN_INTERVAL_S * 1e9))
    assert s.spacing_ns == int(4 * profiling.PROFILE_MIN_INTERVAL_S * 1e9)  # doubling
    for k in range(20):
        s.due(t + 10**11 * (k + 1))
    assert s.spacing_ns == int(profiling.PROFILE_MAX_INTERVAL_S * 1e9)
    sys.setprofile(lambda *a: None)
    try:
        assert not s.due(t + 10**14)
    finally:
        sys.setprofile(None)
