"""`dldoctor run --trace F`: Chrome trace event JSON for Perfetto / chrome://tracing, checked
against the format and against what a real job did: a track per worker whose fetch spans
never overlap, getitem and collate inside their fetch, every batch the main process got
has its worker's spans (by loader, epoch and batch index), wait and step spans on the main
track, counters monotone in time, all on one clock (CLOCK_MONOTONIC)."""

from __future__ import annotations

import json
import sys
import time
from collections import defaultdict

import pytest

from doctor_run import run_doctor

pytestmark = pytest.mark.scenario
EPS_US = 0.002  # timestamps are written in microseconds with 3 decimals

JOB = r"""
import time, torch
from torch.utils.data import DataLoader, Dataset

class Sleepy(Dataset):
    def __len__(self):
        return 400
    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((16,), float(i))

def collate(samples):
    time.sleep(0.002)
    return torch.stack(samples)

if __name__ == "__main__":
    loader = DataLoader(Sleepy(), batch_size=4, num_workers=2, collate_fn=collate,
                        persistent_workers=True, multiprocessing_context="fork")
    n = 0
    for epoch in range(2):
        for b in loader:
            time.sleep(0.003)
            n += 1
    print("batches:", n)
"""


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trace")
    job = tmp / "job.py"
    job.write_text(JOB)
    out = str(tmp / "run.trace.json")
    t0 = time.monotonic_ns()
    r = run_doctor([sys.executable, str(job)], tmp, ("--trace", out))
    t1 = time.monotonic_ns()
    assert r.returncode == 0, r.stderr
    with open(out) as f:
        doc = json.load(f)
    return doc, r, t0, t1


def _check_format(doc: dict) -> None:
    assert isinstance(doc["traceEvents"], list) and doc["traceEvents"]
    assert doc["otherData"]["clock"] == "CLOCK_MONOTONIC"
    for e in doc["traceEvents"]:
        ph = e["ph"]
        assert isinstance(e["name"], str) and e["name"]
        assert isinstance(e["pid"], int)
        if ph == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index")
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] >= 0
        if ph == "X":
            assert isinstance(e["tid"], int)
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0
        elif ph == "C":
            assert e["args"] and all(isinstance(v, (int, float)) for v in e["args"].values())
        elif ph == "i":
            assert e["s"] in ("t", "p", "g")
        else:
            raise AssertionError(f"unexpected phase {ph!r} in {e}")


def test_trace_follows_the_format_and_the_job(traced):
    doc, r, t0, t1 = traced
    _check_format(doc)
    ev = doc["traceEvents"]
    assert doc["otherData"]["cut"] is False and doc["otherData"]["events_dropped"] == 0

    # One clock: every timestamp lies within the run, as this process's monotonic clock saw it.
    stamps = [e["ts"] for e in ev if "ts" in e]
    assert t0 / 1000 <= min(stamps) and max(stamps) <= t1 / 1000

    names = {e["pid"]: e["args"]["name"] for e in ev if e["name"] == "process_name"}
    worker_pids = {pid for pid, n in names.items() if " worker " in n}
    assert len(worker_pids) == 2, names  # a track per worker
    spans = [e for e in ev if e["ph"] == "X"]
    by_track = defaultdict(list)
    for s in spans:
        by_track[(s["pid"], s["tid"], s["cat"])].append(s)

    # A worker's fetches never overlap; getitem and collate lie inside their fetch, in order.
    fetches = {}
    for (pid, _tid, cat), ss in by_track.items():
        ss.sort(key=lambda s: s["ts"])
        if cat in ("fetch", "getitem", "collate"):
            assert pid in worker_pids
            for a, b in zip(ss, ss[1:]):
                assert b["ts"] >= a["ts"] + a["dur"] - EPS_US, (cat, a, b)
        if cat == "fetch":
            for s in ss:
                assert s["name"] == f"fetch {s['args']['batch']}"
                fetches[(s["args"]["loader"], s["args"]["epoch"], s["args"]["batch"])] = s
    for s in spans:
        if s["cat"] in ("getitem", "collate"):
            f = next(
                f
                for f in by_track[(s["pid"], s["tid"], "fetch")]
                if f["args"]["batch"] == s["args"]["batch"]
                and f["ts"] - EPS_US <= s["ts"] <= f["ts"] + f["dur"] + EPS_US
            )
            assert s["ts"] + s["dur"] <= f["ts"] + f["dur"] + EPS_US
            assert s["name"].endswith(f" {f['args']['batch']}")

    # Every batch that reached the main process has its worker's spans, done before it was
    # handed out: 2 epochs of 100 batches.
    waits = [s for s in spans if s["cat"] == "wait"]
    assert len(waits) == 200
    assert {s["args"]["epoch"] for s in waits} == {1, 2}
    for w in waits:
        key = (w["args"]["loader"], w["args"]["epoch"], w["args"]["batch"])
        assert key in fetches, f"batch {key} has no worker span"
        f = fetches[key]
        assert names[f["pid"]].endswith(f"worker {w['args']['worker']} (pid {f['pid']})")
        assert f["ts"] + f["dur"] <= w["ts"] + w["dur"] + EPS_US
    # The main track: wait and step alternate without overlap.
    main = sorted(
        (s for s in spans if s["cat"] in ("wait", "step")), key=lambda s: (s["ts"], s["cat"])
    )
    assert {s["pid"] for s in main} == {next(p for p, n in names.items() if n.startswith("main"))}
    for a, b in zip(main, main[1:]):
        assert b["ts"] >= a["ts"] + a["dur"] - EPS_US, (a, b)
    steps = [s for s in main if s["cat"] == "step"]
    assert len(steps) == 198  # every batch but each epoch's first has a step before it
    assert min(s["dur"] for s in steps) >= 3000 - 50  # the job sleeps 3 ms per step

    # Counter tracks: shm, memory, CPU; each monotone in time.
    counters = defaultdict(list)
    for e in ev:
        if e["ph"] == "C":
            counters[(e["pid"], e["name"])].append(e["ts"])
    cnames = {n for _, n in counters}
    assert {"/dev/shm (MiB)", "available memory (MiB)", "CPU (% of a core)"} <= cnames, cnames
    assert any(pid in worker_pids for pid, n in counters if n == "CPU (% of a core)")
    for key, ts in counters.items():
        assert ts == sorted(ts), key
        assert len(set(ts)) == len(ts), key


def test_a_cut_trace_says_so():
    """Past the cap the monitor keeps nothing more, and the trace says how much it left out."""
    from dldoctor.reporters import chrome_trace

    main, worker = 1000, 1001
    events = [
        (1, main, 1_000_000, 0, 0, 1, 2, 4, 0, main, 1, 1, 0),  # iter start: 1 worker
        (2, worker, 2_000_000, 0, 0, 0, 0, 4, 500_000, 100_000, 400_000, 64, 1),
        (3, main, 2_100_000, 0, 0, 0, 0, 0, 500_000, -1, -1, 0, 0),
    ]
    doc = chrome_trace.build(
        {
            "events": events,
            "machine": [],
            "processes": [],
            "dropped_events": 7,
            "dropped_counters": 0,
            "max_events": 3,
        }
    )
    _check_format(doc)
    assert doc["otherData"]["cut"] is True and doc["otherData"]["events_dropped"] == 7
    cut = [e for e in doc["traceEvents"] if e["name"].startswith("trace cut")]
    assert len(cut) == 1 and "7 later events" in cut[0]["name"]


FAST_JOB = r"""
import torch
from torch.utils.data import DataLoader

if __name__ == "__main__":
    # batch_size 8 of ints in one process: tens of thousands of batches a second
    n = sum(1 for _ in DataLoader(list(range(8 * 150_000)), batch_size=8))
    print("batches:", n)
"""


@pytest.mark.alone  # a loop of thousands of batches a second: CPU-bound
def test_a_fast_loop_is_shown_as_the_sample_it_is(tmp_path):
    job = tmp_path / "fast.py"
    job.write_text(FAST_JOB)
    out = str(tmp_path / "fast.trace.json")
    r = run_doctor([sys.executable, str(job)], tmp_path, ("--trace", out))
    assert r.returncode == 0, r.stderr
    assert "batches: 150000" in r.stdout
    with open(out) as f:
        doc = json.load(f)
    _check_format(doc)
    ev = doc["traceEvents"]
    waits = [e for e in ev if e.get("cat") == "wait"]
    fetches = [e for e in ev if e.get("cat") == "fetch"]
    (end,) = [e for e in ev if e["name"].startswith("epoch 1 ends")]
    assert end["args"]["batches"] == 150_000
    assert doc["otherData"]["sampled"] is True
    assert doc["otherData"]["sample_above_batches_per_s"] == 500
    assert doc["otherData"]["sample_handouts_with_workers_above_per_s"] == 500
    tracks = [e["args"]["name"] for e in ev if e["name"] == "thread_name"]
    assert any("wait / step (a sample" in t for t in tracks), tracks
    assert any("fetch (num_workers=0) (a sample" in t for t in tracks), tracks
    # Each span says how many batches it stands for; together they are nearly all of them
    # (the tail after the last one is on the epoch's end event, which the report counts).
    assert len(waits) < 150_000 / 4 and any(w["args"].get("stands_for", 1) > 1 for w in waits)
    shown = sum(w["args"].get("stands_for", 1) for w in waits)
    assert 150_000 - 5_000 < shown <= 150_000
    assert sum(f["args"].get("stands_for", 1) for f in fetches) <= 150_000
    (loader,) = r.report["loaders"]
    assert loader["batches"] == 150_000  # the report's count is exact
