"""Machine facts from the C++ readers, checked against independent sources (os, shutil,
resource) and under real faults: a pinned CPU set, a small /dev/shm, a CPU quota cgroup."""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys

import pytest

from _faults import cpu_quota_cgroup, memory_limit_cgroup, run, run_in_small_shm, taskset_cmd
from dldoctor import _ext

FACTS_JSON = [
    sys.executable,
    "-c",
    "import json, dldoctor._ext as e; print(json.dumps(e.collect_facts()))",
]


def _limit(value: int) -> int | None:
    return None if value == resource.RLIM_INFINITY else value


def facts_in(cmd_wrapper) -> dict:
    r = cmd_wrapper(FACTS_JSON)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_facts_agree_with_independent_sources():
    f = _ext.collect_facts()
    affinity = len(os.sched_getaffinity(0))
    assert f["cpu"]["affinity"] == affinity
    quota = f["cpu"]["cgroup_quota"]
    assert f["cpu"]["usable"] == (min(affinity, quota) if quota else affinity)
    assert f["cpu"]["online"] == os.cpu_count()
    du = shutil.disk_usage("/dev/shm")
    assert f["shm"]["total_bytes"] == du.total
    assert abs(f["shm"]["free_bytes"] - du.free) < 64 << 20  # others use /dev/shm meanwhile
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert (f["limits"]["nofile_soft"], f["limits"]["nofile_hard"]) == (_limit(soft), _limit(hard))
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    assert (f["limits"]["memlock_soft"], f["limits"]["memlock_hard"]) == (
        _limit(soft),
        _limit(hard),
    )
    assert f["memory"]["total_bytes"] == os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    assert f["limits"]["open_fds"] == len(os.listdir("/proc/self/fd")) - 1


def test_pinned_to_one_cpu_reports_one():
    f = facts_in(lambda cmd: run(taskset_cmd([0], cmd)))
    assert f["cpu"]["affinity"] == 1
    assert f["cpu"]["usable"] == 1


def test_small_shm_is_measured():
    f = facts_in(lambda cmd: run_in_small_shm(cmd, mib=16))
    assert f["shm"]["total_bytes"] == 16 << 20
    assert f["shm"]["fs_type"] == "tmpfs"
    assert "size=16384k" in f["shm"]["options"]


def test_cpu_quota_cgroup_is_read():
    with cpu_quota_cgroup(0.5) as cg:
        f = facts_in(cg.run)
    assert f["cpu"]["cgroup_quota"] == 0.5
    assert f["cpu"]["usable"] == 0.5
    assert f["cpu"]["quota_source"].startswith(cg.path)


def test_memory_limit_cgroup_is_read():
    with memory_limit_cgroup(512 << 20) as cg:
        f = facts_in(cg.run)
    assert f["memory"]["cgroup_limit_bytes"] == 512 << 20
    assert f["memory"]["cgroup_source"].startswith(cg.path)
    assert 0 < f["memory"]["cgroup_usage_bytes"] < 512 << 20


def test_missing_sources_are_none_not_zero(tmp_path):
    f = _ext.collect_facts(
        shm_path=str(tmp_path / "no-shm"),
        proc_root=str(tmp_path / "no-proc"),
        sys_root=str(tmp_path / "no-sys"),
        root=str(tmp_path / "no-root"),
    )
    assert f["memory"]["total_bytes"] is None
    assert f["shm"]["total_bytes"] is None
    assert f["limits"]["open_fds"] is None
    assert f["pressure"] == {
        "cpu_some_avg10": None,
        "io_some_avg10": None,
        "memory_some_avg10": None,
    }
    assert f["container"]["in_container"] is None
    assert f["cgroup_version"] == ""
    assert f["cpu"]["affinity"] == len(os.sched_getaffinity(0))  # a syscall, still known


def test_probe_storage_counts_and_reads(tmp_path):
    data = tmp_path / "data"
    (data / "sub").mkdir(parents=True)
    for i in range(5):
        (data / "sub" / f"{i}.bin").write_bytes(os.urandom(256 << 10))
    s = _ext.probe_storage(str(data), max_seconds=2.0, max_files=1000)
    assert s["files"] == 5
    assert s["bytes"] == 5 * (256 << 10)
    assert not s["count_truncated"]
    assert s["read_mb_s"] > 0
    assert s["probe_bytes"] == 5 * (256 << 10)
    assert s["mount_point"] and s["fs_type"]
    assert _ext.probe_storage(str(data), max_files=3)["count_truncated"]


def test_probe_storage_on_tmpfs_says_it_read_the_cache():
    if _ext.collect_facts()["shm"]["fs_type"] != "tmpfs":
        pytest.skip("/dev/shm is not a tmpfs here")
    import tempfile

    with tempfile.TemporaryDirectory(dir="/dev/shm") as d:
        with open(os.path.join(d, "x.bin"), "wb") as f:
            f.write(os.urandom(1 << 20))
        s = _ext.probe_storage(d)
    assert s["fs_type"] == "tmpfs"
    assert s["probe_cached"] is True  # tmpfs refuses O_DIRECT: the rate is memory's
    assert s["block_device"] == "" and s["rotational"] is None


def test_probe_storage_missing_dir_raises_core_error(tmp_path):
    with pytest.raises(_ext.CoreError, match="data directory not found"):
        _ext.probe_storage(str(tmp_path / "nope"))
