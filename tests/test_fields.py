"""The dict glue's field tables (src/dldoctor/_ext/fields.hpp) in both directions: every key a
writer puts out is the key its reader takes back, a value of the wrong type is refused with a
message that names that key, and what a reader does not read stays unread."""

from __future__ import annotations

import os

import pytest

from dldoctor import _ext

BAD = [1]  # a list: wrong for every number and bool field; a string field takes str() of it


def _numeric(d: dict) -> list[str]:
    """The keys of a written dict whose values are numbers or bools (or None: unknown)."""
    return [k for k, v in d.items() if not isinstance(v, (str, dict, list))]


def _refused(key: str, call, *args) -> str:
    """The message of the CoreError that call(*args) raises for the bad `key`."""
    with pytest.raises(_ext.CoreError) as e:
        call(*args)
    msg = str(e.value)
    assert f"field '{key}' must be" in msg and "got list" in msg, msg
    return msg


FACT_KEYS = {
    "cpu": ["online", "affinity", "cgroup_quota", "physical_cores", "usable", "quota_source"],
    "memory": [
        "total_bytes", "available_bytes", "swap_total_bytes", "swap_free_bytes",
        "cgroup_limit_bytes", "cgroup_usage_bytes", "cgroup_working_set_bytes", "cgroup_source",
    ],
    "shm": ["path", "total_bytes", "free_bytes", "fs_type", "options"],
    "limits": ["nofile_soft", "nofile_hard", "memlock_soft", "memlock_hard", "open_fds"],
}  # fmt: skip


@pytest.mark.parametrize("section", list(FACT_KEYS))
def test_every_fact_written_is_read_back(section):
    written = _ext.collect_facts()[section]
    assert list(written) == FACT_KEYS[section]
    keys = _numeric(written)
    assert keys, written
    for k in keys:
        msg = _refused(k, _ext.Analyzer().set_facts_dict, {section: {k: BAD}})
        assert msg.startswith("facts field"), msg
    # A string field reads anything (as its str()), and the whole section as written is taken.
    _ext.Analyzer().set_facts_dict({section: {k: BAD for k in written if k not in keys}})
    _ext.Analyzer().set_facts_dict({section: written})


def test_every_storage_field_written_is_read_back(tmp_path):
    (tmp_path / "a.bin").write_bytes(b"x" * 4096)
    written = _ext.probe_storage(str(tmp_path), 0.2, 100)
    keys = _numeric(written)
    assert {"network_fs", "files", "bytes", "count_truncated", "probe_cached"} <= set(keys)
    for k in keys:
        _refused(k, _ext.Analyzer().set_data_storage_dict, dict(written, **{k: BAD}))
    _ext.Analyzer().set_data_storage_dict(written)


def test_a_snapshot_reads_back_what_it_writes_less_the_write_only_figures():
    snap = _ext.Sampler(os.getpid(), threads=True).sample_once()
    for k in ("t_ns", "cost_ns", "seq"):
        _refused(k, _ext.Analyzer().ingest_snapshot, {k: BAD})
    for k in _numeric(snap["machine"]):
        _refused(k, _ext.Analyzer().ingest_snapshot, {"machine": {k: BAD}})
    proc = snap["processes"][0]
    write_only = {"active_threads", "smaps_fresh", "minor_faults_per_s", "major_faults_per_s"}
    assert write_only <= set(proc), proc.keys()
    for k in _numeric(proc):
        bad = {"processes": [{k: BAD}]}
        if k in write_only:
            _ext.Analyzer().ingest_snapshot(bad)  # never read: a bad value there is not looked at
        else:
            _refused(k, _ext.Analyzer().ingest_snapshot, bad)
    _ext.Analyzer().ingest_snapshot(snap)


def test_the_process_dict_keeps_its_keys_in_order():
    proc = _ext.Sampler(os.getpid()).sample_once()["processes"][0]
    assert list(proc) == [
        "pid", "ppid", "state", "comm", "num_threads", "active_threads", "cpu_pct",
        "runq_delay_pct", "runq_wait_per_slice_us", "voluntary_cs_per_s",
        "involuntary_cs_per_s", "rss_bytes",
        "pss_bytes", "private_dirty_bytes", "smaps_fresh", "read_bytes_per_s", "rchar_per_s",
        "read_bytes_total", "rchar_total", "cpu_ns_total", "open_fds", "minor_faults_per_s",
        "major_faults_per_s", "wchan", "threads",
    ]  # fmt: skip
    assert proc["pid"] == os.getpid() and proc["comm"]


def test_tune_reads_every_profile_and_settings_field():
    profile_keys = [
        "num_workers", "prefetch_factor", "persistent_workers", "usable_cpus", "cpu_workers",
        "cpu_left", "per_worker_cpu", "fetch_s", "step_s", "main_cpu_cores", "batches_per_s",
        "off_cpu", "startup_bound", "thread_oversubscribed", "keeps_up",
    ]  # fmt: skip
    for k in profile_keys:
        assert "tune profile field" in _refused(k, _ext.tune_effective, {k: BAD}, {})
    for k in ["num_workers", "prefetch_factor", "persistent_workers", "worker_threads"]:
        assert "tune settings field" in _refused(k, _ext.tune_effective, {}, {k: BAD})
    # A missing prefetch_factor is the DataLoader's default; given ones come through.
    assert _ext.tune_effective({"num_workers": 3}, {})["prefetch_factor"] == (
        _ext.DEFAULT_PREFETCH_FACTOR
    )
    got = _ext.tune_effective({"num_workers": 3, "prefetch_factor": 5}, {"num_workers": 2.9})
    assert got["num_workers"] == 2 and got["prefetch_factor"] == 5, got


@pytest.mark.parametrize(
    "snapshot, key",
    [({"processes": [{"pid": 5, k: BAD}]}, k) for k in
     ["loader", "worker", "cpu_ns_since_stall", "cpu_window_s", "gone", "exit_code", "exit_signal"]]
    + [({"t_ns": BAD}, "t_ns"), ({"stalled_s": BAD}, "stalled_s")]
    + [({"processes": [{"pid": 5, "stacks": [{k: BAD}]}]}, k) for k in
       ["current", "no_python_frame", "elided", "truncated"]]
    + [({"processes": [{"pid": 5, "stacks": [{"frames": [{"line": BAD}]}]}]}, "line")],
)  # fmt: skip
def test_a_hang_snapshot_names_its_bad_field(snapshot, key):
    _refused(key, _ext.classify_hang, snapshot)


def test_failure_notes_name_their_bad_field_and_dataset_notes_are_lenient(tmp_path):
    m = _ext.Monitor(str(tmp_path / "ring"), 1024, 0.1, run_dir=str(tmp_path))
    fields = {
        "death": ["worker", "pid", "exit_code", "signal", "cgroup_oom_kills", "cgroup_peak_bytes"],
        "error": ["worker", "pid", "cuda_peak_bytes", "index", "epoch"],
        "runtime": ["pid", "nofile_soft", "nofile_unlimited", "accelerator", "process_only"],
        "cgroup_memory": ["limit_bytes", "usage_bytes", "peak_bytes"],
        "cuda_memory": ["device", "batch_size", "peak_bytes", "total_bytes"],
    }
    for kind, keys in fields.items():
        for k in keys:
            note = {"kind": kind, "t_ns": 1, "loader": 0, k: BAD}
            assert "failure note field" in _refused(k, m.note_failure, note)
    # The side logs' dataset and slow-batch notes never raise: a bad value is unknown.
    m.note_dataset(0, {"length": BAD, "pickle_ms": "x", "attrs": [{"name": "a", "bytes": BAD}]})
    m.note_slow_batch(0, {"pid": BAD, "worker": "x", "samples": [1, "a"]})
