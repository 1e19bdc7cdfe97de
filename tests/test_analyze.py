"""The analyzer binding: Python tuples and dicts in, finding and loader dicts out.

The rules themselves are tested at their thresholds in tests/cpp/analyze_*_test.cpp; here
the round trip, the shapes the rest of the package relies on, real facts and sampler passes
accepted as they come, and bad input turned into one-line errors.
"""

from __future__ import annotations

import os

import pytest

_ext = pytest.importorskip("dldoctor._ext")

MS = 1_000_000
S = 1_000_000_000
T0 = 1000 * S
ITER_START, WORKER_BATCH, MAIN_BATCH, WORKER_START = 1, 2, 3, 4
MAIN_PID, WORKER_PID0 = 4242, 5000


def slow_getitem_stream(
    seconds=12.0, workers=2, fetch_ms=100.0, step_ms=20.0, on_cpu=0.95, prefetch=2
):
    """Events of a loader whose workers supply fewer batches (of 1 MiB) than the loop asks for."""
    ev = [(ITER_START, MAIN_PID, T0, 0, 0, workers, prefetch, 32, 0, MAIN_PID, 1, 0)]
    ev += [
        (WORKER_START, WORKER_PID0 + w, T0, 0, 0, w, -1, 0, MAIN_PID, 0, 0, 0)
        for w in range(workers)
    ]
    wait_ms = max(0.0, fetch_ms / workers - step_ms)
    t, i = T0, 0
    while t < T0 + seconds * S:
        wait = int((fetch_ms if i == 0 else wait_ms) * MS)
        handed = t + wait
        fetch = int(fetch_ms * MS)
        ev.append(
            (
                WORKER_BATCH,
                WORKER_PID0 + i % workers,
                handed - fetch,
                0,
                0,
                i % workers,
                i,
                32,
                fetch,
                1 * MS,
                int(on_cpu * fetch),
                1 << 20,
            )
        )
        ev.append(
            (
                MAIN_BATCH,
                MAIN_PID,
                t,
                0,
                0,
                -1,
                i,
                0,
                wait,
                -1 if i == 0 else int(step_ms * MS),
                -1,
                0,
            )
        )
        t = handed + int(step_ms * MS)
        i += 1
    return ev, t


def snapshots(seconds=12.0, workers=2, worker_cpu=95.0):
    out = []
    for k in range(int(seconds * 10)):
        procs = [
            {
                "pid": MAIN_PID,
                "ppid": 1,
                "state": "S",
                "comm": "python",
                "cpu_pct": 30.0,
                "runq_delay_pct": 1.0,
                "involuntary_cs_per_s": None,
                "rss_bytes": None,
            }
        ]
        procs += [
            {
                "pid": WORKER_PID0 + w,
                "ppid": MAIN_PID,
                "state": "R",
                "comm": "pt_data_worker",
                "cpu_pct": worker_cpu,
                "runq_delay_pct": 1.0,
                "involuntary_cs_per_s": 3.0,
                "read_bytes_per_s": 0.0,
                "rchar_per_s": 1e6,
                "wchan": "",
            }
            for w in range(workers)
        ]
        out.append(
            {"t_ns": T0 + k * 100 * MS, "machine": {"io_pressure_some": None}, "processes": procs}
        )
    return out


FACTS = {
    "cpu": {"usable": 8.0, "affinity": 8, "online": 64},
    "memory": {"available_bytes": 16 << 30},
}


def test_round_trip_names_the_bottleneck_with_its_numbers():
    a = _ext.Analyzer()
    a.set_facts_dict(FACTS)
    events, end = slow_getitem_stream()
    a.ingest_events(events)
    for s in snapshots():
        a.ingest_snapshot(s)
    a.add_hot_functions(
        0, [{"name": "resize", "file": "ds.py", "line": 12, "cumulative_ms": 400.0, "calls": 10}]
    )

    findings = a.findings()
    assert [f["id"] for f in findings] == ["slow_getitem"]
    f = findings[0]
    assert set(f) == {"id", "severity", "title", "evidence", "fix", "why", "loader", "score"}
    assert f["severity"] == "critical" and f["loader"] == 0
    ev = f["evidence"]
    assert ev["data_stall_fraction"] == pytest.approx(0.6)
    assert ev["recommended_num_workers"] == 6  # from 8 usable CPUs, not the 64 online
    assert ev["worker_capacity_batches_per_s"] == pytest.approx(20, rel=0.02)
    assert "resize (ds.py:12)" in ev["hot_functions"]
    assert "num_workers=6" in f["fix"]
    assert a.verdict(findings) == "slow_getitem"

    recent = a.findings(end, whole_run=False)
    assert a.verdict(recent) == "slow_getitem"
    assert a.verdict(a.findings(0, False)) == "slow_getitem"
    assert a.latest_ns >= end - 20 * MS
    assert a.events == len(events)


def test_loader_summary_shape():
    a = _ext.Analyzer()
    events, _ = slow_getitem_stream(seconds=3)
    for e in events:
        a.ingest_event(e)
    for s in snapshots(seconds=3):
        a.ingest_snapshot(s)
    (ld,) = a.loaders()
    assert ld["id"] == 0 and ld["num_workers"] == 2 and ld["batch_size"] == 32
    assert ld["prefetch_factor"] == 2 and ld["start_method"] == "fork"
    assert ld["pin_memory"] is False and ld["dataset_kind"] == "map"
    assert ld["batches"] == len(events) // 2 - 1
    assert ld["data_stall_pct"] == pytest.approx(60)
    assert ld["worker_pids"] == [WORKER_PID0, WORKER_PID0 + 1]
    assert ld["worker_cpu_pct"] == pytest.approx(95)
    assert ld["read_mb_s"] == pytest.approx(0)
    assert ld["first_batch_latency_ms"] == pytest.approx(100)
    assert [w["worker"] for w in ld["workers"]] == [0, 1]
    assert ld["pin_memory_ms"] is None  # unknown stays None, never 0


def test_healthy_loader_gives_no_findings():
    a = _ext.Analyzer()
    a.set_facts_dict(FACTS)
    events, _ = slow_getitem_stream(fetch_ms=10)
    a.ingest_events(events)
    assert a.findings() == []
    assert a.verdict([]) == "healthy"


def test_verdict_reads_plain_dicts():
    a = _ext.Analyzer()
    fs = [
        {"id": "main_process_bound", "severity": "info", "score": 1.0},
        {"id": "io_bound", "severity": "critical", "score": 0.2},
        {"id": "slow_collate", "severity": "critical", "score": 0.5},
    ]
    assert a.verdict(fs) == "slow_collate"


def test_real_facts_and_real_sampler_passes_are_accepted():
    a = _ext.Analyzer()
    a.set_facts_dict(_ext.collect_facts())
    a.set_facts_dict({})  # everything unknown
    if hasattr(_ext, "Sampler"):
        sampler = _ext.Sampler(os.getpid())
        a.ingest_snapshot(sampler.sample_once())
        a.ingest_snapshot(sampler.sample_once())
    a.ingest_snapshot({"t_ns": 1, "machine": None, "processes": None})
    assert a.findings(0, False) == []


def test_storage_dict_sets_the_data_storage():
    a = _ext.Analyzer()
    a.set_facts_dict(
        {**FACTS, "storage": {"fs_type": "nfs4", "network_fs": True, "bytes": 1 << 30}}
    )
    events, _ = slow_getitem_stream(on_cpu=0.05)
    a.ingest_events(events)
    (f,) = a.findings()
    assert f["id"] == "io_bound"
    assert f["evidence"]["data_fs_type"] == "nfs4"
    assert "more workers than cores" in f["why"]


def test_shm_fix_is_worded_as_dldoctor_check_words_it():
    # 2 workers x prefetch_factor 8 + 1 held = 17 MiB in flight; 12 MiB free fits prefetch 2.
    a = _ext.Analyzer()
    a.set_facts_dict(
        {**FACTS, "container": {"kind": "kubernetes"}, "shm": {"free_bytes": 12 << 20}}
    )
    events, _ = slow_getitem_stream(prefetch=8)
    a.ingest_events(events)
    (out,) = [f for f in a.findings() if f["id"] == "shm_exhausted"]
    lines = out["fix"].split("\n")
    assert lines[0].startswith("make /dev/shm at least 1 GiB")
    assert lines[1].startswith("Kubernetes:")  # the machine's own kind first
    assert "--shm-size=1g" in out["fix"] and "remount,size=1G" in out["fix"]
    assert lines[-1].startswith("or keep fewer batches in flight: prefetch_factor=2")
    # `dldoctor check` words it with the same function.
    assert out["fix"].split("\n")[:-1] == _ext.shm_fix("kubernetes", 17 << 20).split("\n")[:-1]


@pytest.mark.parametrize(
    "call, arg, words",
    [
        ("ingest_event", (1, 2, 3), "12-tuple"),
        ("ingest_event", "nope", "12-tuple"),
        ("ingest_event", (1, 2, "x", 0, 0, 0, 0, 0, 0, 0, 0, 0), "t_ns"),
        ("ingest_snapshot", [], "snapshot"),
        ("ingest_snapshot", {"t_ns": 1, "processes": [{"pid": 1, "cpu_pct": "hot"}]}, "cpu_pct"),
        ("set_facts_dict", {"cpu": {"usable": "eight"}}, "usable"),
        ("set_facts_dict", 3, "collect_facts"),
    ],
)
def test_bad_input_is_one_line_core_error(call, arg, words):
    a = _ext.Analyzer()
    with pytest.raises(_ext.CoreError) as e:
        getattr(a, call)(arg)
    msg = str(e.value)
    assert words in msg and "\n" not in msg
