"""A finding's evidence as the terminal and HTML reports show it (reporters/evidence.py):
grouped with units, paths shortened, and one line where two figures of the same thing
differ. The JSON keeps the rules' keys and values as they are."""

from __future__ import annotations

import json
import os
import re

from dldoctor.report import Report
from dldoctor.reporters import evidence, terminal

# The evidence of a slow_getitem finding as the rules wrote it for the demo (a real run's
# keys and order; the paths as a user's venv and working directory have them).
CWD = "/home/u/proj"
EVIDENCE = {
    "data_stall_fraction": 0.883,
    "num_workers": 1.0,
    "getitem_p50_ms": 20.4,
    "getitem_p99_ms": 46.9,
    "collate_p50_ms": 0.31,
    "fetch_p50_ms": 660.2,
    "samples_per_batch": 32.0,
    "worker_capacity_batches_per_s": 4.3,
    "consumer_demand_batches_per_s": 37.1,
    "worker_on_cpu_fraction": 0.84,
    "usable_cpus": 2.0,
    "main_process_cpu_cores": 0.191,
    "other_processes_cpu_cores": 1.05,
    "hot_functions": (
        "Demo.__getitem__ (/home/u/proj/.venv/lib/python3.11/site-packages/dldoctor/demo.py:92) "
        "35.6 ms/call, 1424 ms in 40 calls; decode_and_resize (/home/u/proj/train_utils.py:60) "
        "34.9 ms/call, 1396 ms in 40 calls"
    ),
    "shm_free_bytes": 25 * 2**30 + 2**29,
}


def test_entries_are_grouped_with_units():
    groups = dict(evidence.grouped(EVIDENCE, cwd=CWD))
    assert list(groups) == ["loop", "fetch", "CPU", "memory"]
    loop = dict(groups["loop"])
    assert loop["data stall"] == "88.3 %"
    assert loop["consumer demand"] == "37.1 batches/s"
    assert loop["worker capacity"] == "4.3 batches/s"
    assert loop["samples per batch"] == "32"
    fetch = dict(groups["fetch"])
    assert fetch["getitem p50"] == "20.4 ms" and fetch["fetch p50"] == "660 ms"
    cpu = dict(groups["CPU"])
    assert cpu["worker on CPU"] == "84 %" and cpu["main process CPU"] == "0.191 CPUs"
    assert cpu["num workers"] == "1" and cpu["usable CPUs"] == "2"
    assert dict(groups["memory"])["/dev/shm free"] == "25.5 GiB"
    # Every entry is shown once: grouping loses nothing.
    assert sum(len(e) for e in groups.values()) == len(EVIDENCE)


def test_paths_are_relative_or_package_paths():
    assert evidence.short_path("/x/.venv/lib/python3.11/site-packages/PIL/Image.py") == (
        "PIL/Image.py"
    )
    assert evidence.short_path("/usr/lib/python3/dist-packages/numpy/core.py") == "numpy/core.py"
    assert evidence.short_path("/home/u/proj/data/ds.py", cwd=CWD) == "data/ds.py"
    assert evidence.short_path("/home/u/projX/ds.py", cwd=CWD) == "/home/u/projX/ds.py"
    assert evidence.short_path("/etc/x.py", cwd=CWD) == "/etc/x.py"
    hot = dict(dict(evidence.grouped(EVIDENCE, cwd=CWD))["fetch"])["hot functions"]
    assert "(dldoctor/demo.py:92) 35.6 ms/call" in hot, hot
    assert "(train_utils.py:60)" in hot and "/home/u" not in hot, hot


def test_the_two_getitem_figures_are_explained_once_when_they_differ():
    (line,) = evidence.differing_figures(EVIDENCE)
    assert line.startswith("getitem p50 (20.4 ms) and the profile's 35.6 ms/call for "), line
    assert "Demo.__getitem__" in line and "median per sample" in line and "profiler" in line
    close = {**EVIDENCE, "getitem_p50_ms": 34.0}  # within DIFFER_SHARE: the same figure
    assert evidence.differing_figures(close) == []
    assert evidence.differing_figures({"getitem_p50_ms": 20.4}) == []
    unknown = {**EVIDENCE, "getitem_p50_ms": "unknown"}  # attached without the hooks
    assert evidence.differing_figures(unknown) == []


def test_terminal_panel_shows_groups_not_a_wall_of_pairs(monkeypatch):
    monkeypatch.chdir("/")
    finding = {
        "id": "slow_getitem",
        "severity": "critical",
        "title": "Loader 1: __getitem__ is too slow for the loop",
        "evidence": EVIDENCE,
        "fix": "make decode_and_resize (/home/u/proj/.venv/lib/python3.11/site-packages/"
        "dldoctor/demo.py:60) cheaper",
        "why": "because",
    }
    text = terminal.render_text(Report(verdict="slow_getitem", findings=[finding]), width=200)
    assert "data_stall_fraction=" not in text and "=" not in text.split("Fix:")[0], text
    # Each group starts a line of its own, under "Evidence:".
    starts = [line.split("│")[1].split()[:2] for line in text.splitlines() if "│" in line]
    groups = [w[1] if w[0] == "Evidence:" else w[0] for w in starts if w]
    for group in ("loop", "fetch", "CPU", "memory", "note"):
        assert group in groups, (group, text)
    assert "data stall 88.3 %" in text and "consumer demand 37.1 batches/s" in text, text
    assert "(dldoctor/demo.py:60) cheaper" in text and "site-packages" not in text, text
    # Rendering only: the finding itself, and so the JSON, keeps the rules' keys and paths.
    assert json.loads(json.dumps(finding))["evidence"] == EVIDENCE
    assert "site-packages" in finding["fix"]


def test_every_key_the_rules_write_has_a_group():
    # A rule's key left to "other" reads as unsorted: each one the C++ rules add has a group.
    root = os.path.join(os.path.dirname(__file__), "..", "src", "dldoctor_core", "analyze")
    keys = set()
    for folder, _, files in os.walk(root):
        for name in files:
            if name.endswith(".cpp"):
                with open(os.path.join(folder, name)) as f:
                    keys |= set(re.findall(r'\.add\("([a-z_0-9]+)"', f.read()))
    assert len(keys) > 150, len(keys)  # the pattern still finds them
    assert [k for k in sorted(keys) if evidence.group_of(k) == "other"] == []


def test_a_rate_of_mib_reads_as_mib_per_second():
    # cow_memory_growth under attach: a rate in MiB, not a bare "/s" on a label saying "MiB".
    assert evidence.label_and_value("private_dirty_mib_per_s", 2.5) == (
        "private dirty",
        "2.5 MiB/s",
    )
    assert evidence.label_and_value("projected_growth_next_10_min_mib", 1500) == (
        "projected growth next 10 min",
        "1500 MiB",
    )
    # A unit inside the name is put on the value as well.
    assert evidence.label_and_value("pinned_bytes_in_flight", 3 * 2**30) == (
        "pinned in flight",
        "3 GiB",
    )
    assert evidence.label_and_value("epoch_s_mean", 1.25) == ("epoch mean", "1.25 s")
    assert evidence.label_and_value("cpu_pct_per_active_thread", 40) == (
        "CPU per active thread",
        "40 %",
    )
