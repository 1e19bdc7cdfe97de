"""`dldoctor check`: its JSON against independent sources, its verdicts under real faults
(a pinned CPU, a 16 MiB /dev/shm, a CPU quota, hidden /proc files), bad input, and speed."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import time

import pytest

from _faults import cpu_quota_cgroup, namespace_cmd, run, run_in_small_shm, taskset_cmd
from dldoctor.preflight import checks as _preflight
from dldoctor.preflight import facts as _facts

CHECK = [sys.executable, "-m", "dldoctor", "check"]


def check_json(*args: str, wrap=run, env=None) -> tuple[subprocess.CompletedProcess, dict]:
    r = wrap([*CHECK, "--json", "-", *args], **({"env": env} if env else {}))
    assert "Traceback" not in r.stderr, r.stderr
    assert r.returncode in (0, 1), r.stderr
    return r, json.loads(r.stdout)


def by_id(doc: dict) -> dict:
    return {c["id"]: c for c in doc["checks"]}


def _limit(value: int) -> int | None:
    return None if value == resource.RLIM_INFINITY else value


# --- ground truth ------------------------------------------------------------------------------


def test_json_agrees_with_independent_sources():
    r, doc = check_json()
    assert doc["schema"] == 1 and doc["tool_version"]
    facts, checks = doc["facts"], by_id(doc)
    affinity = len(os.sched_getaffinity(0))
    quota = facts["cpu"]["cgroup_quota"]
    usable = min(affinity, quota) if quota else affinity
    assert facts["cpu"]["affinity"] == affinity
    assert checks["cpu_usable"]["value"] == usable
    assert checks["num_workers"]["value"] == max(1, int(usable) - 1)
    du = shutil.disk_usage("/dev/shm")
    assert facts["shm"]["total_bytes"] == du.total
    assert abs(checks["shm_size"]["value"] - du.free) < 64 << 20
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert checks["fd_limit"]["value"] == _limit(soft)
    assert facts["limits"]["nofile_hard"] == _limit(hard)
    soft, _ = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    assert checks["memlock"]["value"] == _limit(soft)
    for c in doc["checks"]:
        assert set(c) >= {"id", "status", "value", "message", "fix"}
        assert c["status"] in ("ok", "warn", "fail", "unknown")
        assert c["status"] == "ok" or c["fix"] or c["status"] == "unknown", c
    assert (
        doc["exit_code"]
        == r.returncode
        == (1 if any(c["status"] == "fail" for c in doc["checks"]) else 0)
    )


def test_pinned_to_one_cpu_reports_one_usable_cpu():
    _, doc = check_json(wrap=lambda cmd, **kw: run(taskset_cmd([0], cmd), **kw))
    checks = by_id(doc)
    assert checks["cpu_usable"]["value"] == 1
    assert checks["num_workers"]["value"] == 1
    assert checks["num_workers"]["status"] == "warn"  # 1 worker + the main process > 1 CPU
    if os.cpu_count() > 1:
        assert checks["cpu_usable"]["status"] == "warn"
        assert "os.cpu_count()" in checks["cpu_usable"]["fix"]


def test_small_shm_fails_for_big_batches_and_passes_small_ones():
    wrap = lambda cmd, **kw: run_in_small_shm(cmd, 16, **kw)  # noqa: E731
    r, doc = check_json("--batch-bytes", "64M", wrap=wrap)
    shm = by_id(doc)["shm_size"]
    assert doc["facts"]["shm"]["total_bytes"] == 16 << 20
    assert shm["value"] == doc["facts"]["shm"]["free_bytes"] <= 16 << 20
    assert shm["status"] == "fail"
    assert r.returncode == 1
    workers = by_id(doc)["num_workers"]["value"]  # the suggested num_workers, when not given
    assert doc["assumptions"]["in_flight_bytes"] == workers * 2 * 64_000_000
    for needle in ("--shm-size=", "--ipc=host", "medium: Memory", "sizeLimit:", "remount,size="):
        assert needle in shm["fix"]

    # The healthy twin: 1 MiB batches x 2 workers x 2 = 4 MiB, with 2x margin under 16 MiB.
    r, doc = check_json("--batch-bytes", "1Mi", "--num-workers", "2", wrap=wrap)
    assert by_id(doc)["shm_size"]["status"] == "ok"
    assert doc["assumptions"]["batch_bytes"] == 1 << 20

    # Between: fits, but with less than the margin.
    r, doc = check_json("--batch-bytes", "3Mi", "--num-workers", "2", wrap=wrap)
    assert by_id(doc)["shm_size"]["status"] == "warn"


def test_cpu_quota_of_half_a_cpu_is_reported():
    with cpu_quota_cgroup(0.5) as cg:
        _, doc = check_json(wrap=cg.run)
    checks = by_id(doc)
    assert doc["facts"]["cpu"]["cgroup_quota"] == 0.5
    assert checks["cpu_usable"]["value"] == 0.5
    assert checks["cpu_usable"]["status"] == "warn"
    assert checks["num_workers"]["status"] == "warn"


def test_unreadable_proc_sources_show_unknown_not_a_crash():
    hide = ["/proc/meminfo", "/proc/pressure"]
    r = run(namespace_cmd([*CHECK, "--json", "-"], hide=hide))
    assert "Traceback" not in r.stderr and r.returncode in (0, 1), r.stderr
    checks = by_id(json.loads(r.stdout))
    assert checks["ram"]["status"] == "unknown" and checks["ram"]["value"] is None
    assert checks["swap"]["status"] == "unknown"
    assert checks["pressure"]["status"] == "unknown"
    assert checks["cpu_usable"]["status"] != "unknown"  # the rest still works

    table = run(namespace_cmd(CHECK, hide=hide), env={**os.environ, "COLUMNS": "200"})
    assert "Traceback" not in table.stderr, table.stderr
    rows = {ln.split("│")[1].strip(): ln for ln in table.stdout.splitlines() if ln.count("│") > 3}
    assert "UNKNOWN" in rows["ram"] and "unknown" in rows["ram"]
    assert "UNKNOWN" in rows["pressure"]


def test_checks_survive_facts_read_from_a_missing_proc(tmp_path):
    facts = _facts.collect(proc_root=str(tmp_path / "proc"), sys_root=str(tmp_path / "sys"))
    a = _preflight.Assumptions(1, _preflight.DEFAULT_BATCH_BYTES, False, 1, False)
    checks = {c.id: c for c in _preflight.run_checks(facts, a)}
    assert checks["ram"].status == "unknown"
    assert checks["cgroup_memory"].status == "unknown"
    assert "unknown" in checks["cpu_usable"].message  # the quota could not be read


# --- storage -----------------------------------------------------------------------------------


def test_data_dir_reports_storage(tmp_path):
    for i in range(20):
        (tmp_path / f"{i}.bin").write_bytes(os.urandom(64 << 10))
    _, doc = check_json("--data-dir", str(tmp_path))
    s, checks = doc["facts"]["storage"], by_id(doc)
    assert s["files"] == 20 and s["bytes"] == 20 * (64 << 10)
    assert checks["dataset_size"]["value"] == 20 * (64 << 10)
    assert checks["dataset_size"]["status"] == "ok"  # 1.25 MiB fits in RAM
    assert checks["storage_read"]["value"] > 0
    assert checks["storage_fs"]["value"] == s["fs_type"]


def test_missing_data_dir_is_one_line_error(tmp_path):
    r = run([*CHECK, "--data-dir", str(tmp_path / "missing")])
    assert r.returncode == 2
    assert r.stderr.strip() == f"dldoctor: error: data directory not found: {tmp_path / 'missing'}"
    assert r.stdout == ""


@pytest.mark.parametrize(
    "args, message",
    [
        (["--batch-bytes", "lots"], "--batch-bytes: not a size"),
        (["--ranks", "0"], "--ranks must be 1 or more"),
        (["--ranks", "two"], "--ranks must be a whole number"),
    ],
)
def test_bad_input_is_one_line(args, message):
    r = run([*CHECK, *args])
    assert r.returncode == 2
    assert len(r.stderr.strip().splitlines()) == 1 and message in r.stderr, r.stderr


def test_ranks_default_from_local_world_size():
    _, doc = check_json(env={**os.environ, "LOCAL_WORLD_SIZE": "2"})
    assert doc["assumptions"]["ranks"] == 2
    usable = doc["facts"]["cpu"]["usable"]
    assert by_id(doc)["num_workers"]["value"] == max(1, (int(usable) - 2) // 2)


def test_json_to_file_and_table_to_stdout(tmp_path):
    out = tmp_path / "check.json"
    r = run([*CHECK, "--json", str(out)])
    assert r.returncode in (0, 1)
    assert "shm_size" in r.stdout  # the table
    assert json.loads(out.read_text())["checks"]


# --- without torch, and time -------------------------------------------------------------------


def _site_without_torch(tmp_path) -> str:
    """A copy (by symlinks) of this Python's site-packages without torch: a real environment
    in which torch is not installed."""
    site = sysconfig.get_paths()["purelib"]
    d = tmp_path / "site"
    d.mkdir()
    for name in os.listdir(site):
        if name.split("-")[0] in ("torch", "functorch", "torchgen"):
            continue
        os.symlink(os.path.join(site, name), d / name)
    return str(d)


def test_works_without_torch(tmp_path):
    site = _site_without_torch(tmp_path)
    code = (
        f"import site, sys; site.addsitedir({site!r}); from dldoctor.cli import main; "
        "sys.exit(main(['check', '--json', '-']))"
    )
    r = run([sys.executable, "-S", "-c", code])
    assert "Traceback" not in r.stderr, r.stderr
    doc = json.loads(r.stdout)
    assert doc["facts"]["torch"]["installed"] is False
    assert by_id(doc)["torch"]["status"] == "warn"
    assert doc["facts"]["cuda"]["reason"] == "torch is not installed"


def test_check_does_not_import_torch_without_a_gpu_driver():
    if any(os.path.exists(p) for p in _facts._GPU_DRIVER_PATHS):
        pytest.skip("a GPU driver is present: check imports torch by design")
    code = (
        "import sys; from dldoctor.cli import main; import io, contextlib\n"
        "with contextlib.redirect_stdout(io.StringIO()): main(['check', '--json', '-'])\n"
        "print('torch' in sys.modules)"
    )
    r = run([sys.executable, "-c", code])
    assert r.stdout.strip().splitlines()[-1] == "False", r.stderr


def test_check_takes_under_two_seconds():
    # Best of three: a noisy, shared machine must not fail this, a slow check still does.
    # A contended CPU adds the documented second in which it names who uses the CPU.
    best = float("inf")
    for _ in range(3):
        start = time.monotonic()
        r = run([*CHECK, "--json", "-"])
        took = time.monotonic() - start
        if "cpu_top" in json.loads(r.stdout)["facts"]:
            took -= _preflight.TOP_CPU_WINDOW_S
        best = min(best, took)
        assert r.returncode in (0, 1)
    assert best < 2.0, f"dldoctor check took {best:.2f} s"


def _cpu_pressure() -> float | None:
    try:
        with open("/proc/pressure/cpu") as f:
            return float(f.readline().split()[1].split("=")[1])
    except (OSError, IndexError, ValueError):
        return None


def test_cpu_pressure_names_the_processes_using_the_cpu():
    # Issue 10: check warned "something else is competing for cpu" and the user could not
    # tell it was their own build. Busy loops, one more than the CPUs, make real contention.
    if _cpu_pressure() is None:
        pytest.skip("/proc/pressure/cpu not readable (kernel without PSI)")
    n = len(os.sched_getaffinity(0)) + 1
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]
    try:
        deadline = time.monotonic() + 15  # PSI's avg10 takes a few seconds to rise
        while (_cpu_pressure() or 0) <= _preflight.PRESSURE_WARN_PCT + 5:
            if time.monotonic() > deadline:
                pytest.skip(f"cpu pressure stayed at {_cpu_pressure()}% under {n} busy loops")
            time.sleep(0.5)
        r = run([*CHECK, "--no-cuda"])
    finally:
        for p in busy:
            p.kill()
            p.wait()
    assert r.returncode in (0, 1), r.stderr
    row = next(x for x in r.stdout.splitlines() if x.lstrip("│┃ ").startswith("pressure"))
    assert "WARN" in row, r.stdout
    fix = r.stdout.split("WARN pressure: fix", 1)[1]
    fix = fix.split("\n\n", 1)[0]
    assert "the processes using the CPU most over the last second" in fix, r.stdout
    named = [p.pid for p in busy if f"(pid {p.pid}, " in fix]
    assert named, f"none of the busy loops {[p.pid for p in busy]} named:\n{r.stdout}"
    # Each with its share of a CPU and its command line.
    assert "% of a CPU: " in fix and "while True: pass" in fix, fix


def test_pressure_check_words_the_cpu_users():
    facts = _facts_with(pressure__cpu_some_avg10=60.0, pressure__io_some_avg10=1.0)
    facts["cpu_top"] = [
        {"pid": 41, "comm": "cc1plus", "cmdline": "cc1plus -O2 x.cpp", "cpu_pct": 97.6},
        {"pid": 42, "comm": "python3", "cmdline": "", "cpu_pct": 40.2},
    ]
    c = _preflight.check_pressure(facts)
    assert c.status == "warn"
    assert "cc1plus (pid 41, 98% of a CPU), python3 (pid 42, 40% of a CPU)" in c.message
    assert "cc1plus (pid 41, 98% of a CPU: cc1plus -O2 x.cpp); python3 (pid 42, 40%" in c.fix
    facts["cpu_top"] = []  # read, and nobody used much: said so
    assert "no process used over 5% of a CPU" in _preflight.check_pressure(facts).message
    assert _preflight.cpu_contended(facts)
    assert not _preflight.cpu_contended(_facts_with(pressure__cpu_some_avg10=1.0))


def test_parse_size_suffixes():
    p = _preflight.parse_size
    assert p("64M") == 64_000_000
    assert p("64Mi") == p("64MiB") == 64 << 20
    assert p("1.5G") == 1_500_000_000
    assert p("2Gi") == 2 << 30
    assert p("16K") == 16_000 and p("16Ki") == 16 << 10
    assert p("4096") == 4096
    for bad in ("", "M", "12X", "-1M", "1i"):
        with pytest.raises(ValueError):
            p(bad)


# --- rules at their thresholds (recorded facts: this machine's, with one figure changed) -------


def _facts_with(**changes) -> dict:
    """This machine's facts with `group__key=value` changes applied."""
    facts = json.loads(json.dumps(_facts.collect(cuda="never")))
    for name, value in changes.items():
        group, key = name.split("__")
        facts.setdefault(group, {})[key] = value
    return facts


def _assume(batch_bytes=1 << 20, workers=2, ranks=1) -> _preflight.Assumptions:
    return _preflight.Assumptions(ranks, batch_bytes, True, workers, True)


def test_shm_thresholds():
    a = _assume()  # 2 workers x 2 x 1 MiB = 4 MiB in flight
    need = a.in_flight_bytes
    at = lambda free: _preflight.check_shm(_facts_with(shm__free_bytes=free), a).status  # noqa: E731
    assert at(need - 1) == "fail"
    assert at(need) == "warn"
    assert at(int(need * _preflight.SHM_MARGIN) - 1) == "warn"
    assert at(int(need * _preflight.SHM_MARGIN)) == "ok"
    assert at(None) == "unknown"


def test_workers_per_rank_edges():
    w = _preflight.workers_per_rank
    assert [w(u, 1) for u in (0.5, 1, 2, 3, 8, 8.9)] == [1, 1, 1, 2, 7, 7]
    assert [w(16, r) for r in (1, 2, 3, 8, 16)] == [15, 7, 4, 1, 1]
    at = lambda u: _preflight.check_workers(_facts_with(cpu__usable=u), _assume(workers=1))  # noqa: E731
    assert at(1.99).status == "warn"  # 1 worker + 1 main on fewer than 2 CPUs
    assert at(2).status == "ok"


def test_fd_limit_thresholds():
    edge = _preflight.NOFILE_WARN_BELOW
    at = lambda soft: _preflight.check_fd_limit(  # noqa: E731
        _facts_with(limits__nofile_soft=soft, limits__nofile_hard=None, limits__open_fds=10)
    )
    assert at(edge - 1).status == "warn"
    assert "ulimit -n" in at(edge - 1).fix and "file_system" in at(edge - 1).fix
    assert at(edge).status == "ok"
    facts = _facts_with(limits__nofile_soft=edge, limits__open_fds=edge // 2 + 1)
    assert _preflight.check_fd_limit(facts).status == "warn"


def test_ram_swap_and_pressure_thresholds():
    gib = _preflight.GIB

    def ram(avail):
        facts = _facts_with(
            memory__total_bytes=10 * gib,
            memory__available_bytes=avail,
            memory__cgroup_limit_bytes=None,
        )
        return _preflight.check_ram(facts, _assume()).status

    assert ram(gib - 1) == "warn" and ram(gib) == "ok"
    assert ram(_assume().in_flight_bytes - 1) == "fail"

    def swap(used):
        facts = _facts_with(
            memory__swap_total_bytes=4 * gib, memory__swap_free_bytes=4 * gib - used
        )
        return _preflight.check_swap(facts).status

    edge = _preflight.SWAP_IN_USE_WARN_BYTES
    assert swap(edge) == "ok" and swap(edge + 1) == "warn"

    def pressure(v):
        facts = _facts_with(pressure__cpu_some_avg10=v, pressure__io_some_avg10=0.0)
        return _preflight.check_pressure(facts).status

    assert pressure(_preflight.PRESSURE_WARN_PCT) == "ok"
    assert pressure(_preflight.PRESSURE_WARN_PCT + 0.01) == "warn"


def test_cgroup_limit_caps_available_memory():
    gib = _preflight.GIB
    facts = _facts_with(
        memory__total_bytes=64 * gib,
        memory__available_bytes=60 * gib,
        memory__cgroup_limit_bytes=4 * gib,
        memory__cgroup_working_set_bytes=int(3.8 * gib),
    )
    assert _preflight.effective_memory(facts) == (4 * gib, int(0.2 * gib) + 1)
    assert _preflight.check_ram(facts, _assume()).status == "warn"
    c = _preflight.check_cgroup_memory(facts)
    assert c.status == "warn" and "may use only 4.0 GiB" in c.message


def _storage(**s) -> dict:
    base = {
        "path": "/data",
        "mount_point": "/data",
        "fs_type": "ext4",
        "source": "/dev/sdb1",
        "network_fs": False,
        "block_device": "sdb",
        "device_numbers": "8:17",
        "rotational": False,
        "files": 1000,
        "bytes": 1 << 30,
        "count_truncated": False,
        "read_mb_s": 500.0,
        "probe_bytes": 1 << 28,
        "probe_cached": False,
    }
    base.update(s)
    return {**_facts_with(), "storage": base}


def test_storage_rules():
    p = _preflight
    nfs = p.check_storage_fs(_storage(fs_type="nfs4", source="srv:/x", network_fs=True))
    assert nfs.status == "warn" and "round trip" in nfs.message and "rsync" in nfs.fix
    assert p.check_storage_fs(_storage()).status == "ok"
    spinning = _storage(rotational=True, read_mb_s=p.ROTATIONAL_MAX_MB_S)
    assert p.check_storage_disk(spinning).status == "warn"
    virtual = _storage(rotational=True, read_mb_s=p.ROTATIONAL_MAX_MB_S + 1)
    assert p.check_storage_disk(virtual).status == "ok"
    slow = p.STORAGE_SLOW_MB_S
    assert p.check_storage_read(_storage(read_mb_s=slow - 0.1)).status == "warn"
    assert p.check_storage_read(_storage(read_mb_s=slow)).status == "ok"
    cached = p.check_storage_read(_storage(read_mb_s=1.0, probe_cached=True))
    assert cached.status == "ok" and "page cache" in cached.message
    big_slow = _storage(bytes=1 << 50, read_mb_s=slow - 1)
    assert p.check_dataset_size(big_slow).status == "warn"
    assert p.check_dataset_size(_storage(bytes=1 << 50)).status == "ok"
