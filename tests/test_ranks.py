"""Multi-rank jobs: the rank each main process reads from its environment (torchrun,
Lightning, accelerate, SLURM, Open MPI), and how reports name a rank's loader. The real
torchrun jobs are scenarios (tests/scenarios/catalog.py, `"ranks": 2`)."""

from __future__ import annotations

import time

import pytest

from dldoctor import ranks
from dldoctor.report import loader_label, loader_labels
from doctor_run import catalog, run_doctor, run_entry, scenario

# Each run starts ranks (many processes at once): nothing beside it (tests/conftest.py).
pytestmark = pytest.mark.alone


@pytest.mark.parametrize(
    "env, want",
    [
        (
            {
                "RANK": "3",
                "LOCAL_RANK": "1",
                "WORLD_SIZE": "4",
                "LOCAL_WORLD_SIZE": "2",
                "GROUP_RANK": "1",
            },
            {"rank": 3, "local_rank": 1, "world_size": 4, "local_world_size": 2, "group_rank": 1},
        ),  # torchrun (and accelerate, Lightning's children: the same names)
        (
            {"SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NTASKS": "8"},
            {"rank": 5, "local_rank": 1, "world_size": 8},
        ),
        (
            {
                "OMPI_COMM_WORLD_RANK": "2",
                "OMPI_COMM_WORLD_LOCAL_RANK": "0",
                "OMPI_COMM_WORLD_SIZE": "4",
            },
            {"rank": 2, "local_rank": 0, "world_size": 4},
        ),
        ({"RANK": "1", "SLURM_PROCID": "7"}, {"rank": 1}),  # torchrun's own name first
        ({"RANK": "x", "LOCAL_RANK": ""}, {}),  # not a number: not a rank
        ({}, {}),
    ],
)
def test_rank_of_reads_every_launchers_variables(env, want):
    assert ranks.rank_of(env) == want


def test_a_process_without_ranks_has_none(monkeypatch):
    for names in ranks.RANK_VARS.values():
        for name in names:
            monkeypatch.delenv(name, raising=False)
    assert ranks.this_process() == {}
    monkeypatch.setenv("WORLD_SIZE", "1")  # a size alone names no rank
    assert ranks.this_process() == {}
    monkeypatch.setenv("LOCAL_RANK", "1")  # Lightning's children before the process group
    assert ranks.this_process() == {"local_rank": 1, "world_size": 1}


def test_a_rank_loader_is_named_by_its_rank_and_its_own_number():
    assert loader_label({"id": 3}) == "loader 3"  # a job without ranks: as before
    assert loader_label({"id": 3, "rank": 1, "rank_loader": 2}) == "rank 1 \u00b7 loader 2"
    assert loader_label({"loader": 2, "local_rank": 0}) == "rank 0 \u00b7 loader 2"  # attach
    assert loader_labels([{"id": 1, "rank": 0, "rank_loader": 1}, {"id": 2}]) == {
        1: "rank 0 \u00b7 loader 1",
        2: "loader 2",
    }


# -- Lightning starts its ranks itself ------------------------------------------------------


def test_lightning_ddp_ranks_are_each_reported_with_their_rank(tmp_path):
    pytest.importorskip("lightning", reason="lightning is a test extra (tools/install)")
    r = run_doctor(scenario("_lightning_ddp", "--steps", "40"), tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    loaders = r.report["loaders"]
    # Lightning re-ran the script for rank 1 (LOCAL_RANK set); rank 0 is the user's process,
    # its rank read from torch.distributed once Lightning joined the group.
    assert [(ld["rank"], ld["local_rank"], ld["world_size"]) for ld in loaders] == [
        (0, 0, 2),
        (1, 1, 2),
    ], loaders
    assert all(ld["batches"] >= 40 for ld in loaders), loaders
    assert "rank 0 \u00b7 loader 1" in r.stderr and "rank 1 \u00b7 loader 1" in r.stderr, r.stderr


# -- a hang on one rank: --on-hang abort ends the whole job ------------------------------


def test_abort_at_a_rank_hang_ends_torchrun_and_every_rank(tmp_path):
    r = run_entry(catalog.by_name("worker_hang/ranks"), tmp_path)
    assert r.returncode == 124, r.stderr
    pids = [p["pid"] for p in r.report["hang"]["snapshot"]["processes"]]
    assert len(pids) >= 4, pids  # two main processes and their workers
    deadline = time.monotonic() + 10
    alive = pids
    while alive and time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        time.sleep(0.2)
    assert not alive, f"processes of the job still running after the abort: {alive}"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


# -- many nodes: dldoctor report A.json B.json ----------------------------------------------


def _node_report(path, verdict, loaders, findings=()):
    from dldoctor.report import Report

    Report(
        verdict=verdict,
        findings=list(findings),
        loaders=loaders,
        system={"usable_cpus": 8.0, "shm_total_bytes": 1 << 30},
        exit_code=0,
    ).write_json(str(path))


def test_report_merges_nodes_into_one_job_the_gating_node_first(tmp_path):
    import subprocess
    import sys

    gate = {"id": "straggler_rank", "severity": "critical", "title": "Rank 3 holds the job back"}
    _node_report(
        tmp_path / "node0.json",
        "healthy",
        [
            {"id": 1, "rank": 0, "local_rank": 0, "batches_per_s": 9.1, "data_stall_pct": 2},
            {"id": 2, "rank": 1, "local_rank": 1, "batches_per_s": 9.0, "data_stall_pct": 3},
        ],
    )
    _node_report(
        tmp_path / "node1.json",
        "slow_getitem",
        [
            {"id": 1, "rank": 2, "local_rank": 0, "batches_per_s": 9.0, "data_stall_pct": 4},
            {"id": 2, "rank": 3, "local_rank": 1, "batches_per_s": 9.0, "data_stall_pct": 71},
        ],
        [{"id": "slow_getitem", "severity": "critical", "title": "Rank 3 · loader 1: ..."}, gate],
    )
    out = tmp_path / "job.json"
    cmd = [sys.executable, "-m", "dldoctor", "report", str(tmp_path / "node0.json")]
    cmd += [str(tmp_path / "node1.json"), "--json", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    import json

    job = json.loads(out.read_text())
    assert job["verdict"] == "slow_getitem"  # the gating node's own verdict
    assert [n["node"] for n in job["nodes"]] == ["node1", "node0"]
    assert job["nodes"][0]["slowest_loader"]["rank"] == 3
    assert [n["ranks"] for n in job["nodes"]] == [[2, 3], [0, 1]]
    assert [(f["id"], f["node"]) for f in job["findings"]] == [
        ("slow_getitem", "node1"),
        ("straggler_rank", "node1"),
    ]
    assert [(ld["node"], ld["rank"]) for ld in job["loaders"]] == [
        ("node1", 2),
        ("node1", 3),
        ("node0", 0),
        ("node0", 1),
    ]
    assert "the slowest rank is node1 \u00b7 rank 3 \u00b7 loader 2" in job["notes"][0], job
    assert job["notes"][1].startswith("node1: verdict slow_getitem, ranks 2, 3"), job["notes"]


def test_report_of_a_missing_file_is_one_line(tmp_path):
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "dldoctor", "report", str(tmp_path / "a.json")]
    p = subprocess.run(cmd + [str(tmp_path / "b.json")], capture_output=True, text=True)
    assert p.returncode != 0 and "Traceback" not in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_the_merged_verdict_and_order_are_decided_in_cpp(tmp_path):
    """The job's verdict is its first critical finding over every node (a node that failed
    outranks the slowest node's warning), each node's budgets are summed over its ranks."""
    from dldoctor import _ext
    from dldoctor.report import Report, merge_reports

    def loader(lid, rank, stall, **kw):
        ld = {"id": lid, "rank": rank, "rank_loader": 1, "batches_per_s": 3.0}
        ld.update(data_stall_pct=stall, num_workers=2, prefetch_factor=3, batch_bytes=2 << 20)
        return {**ld, **kw}

    slow = Report(
        verdict="healthy",
        findings=[{"id": "thread_oversubscription", "severity": "warning", "title": "t"}],
        loaders=[loader(1, 0, 60), loader(2, 1, 58)],
        system={"usable_cpus": 4.0, "shm_total_bytes": 24 << 20, "shm_free_bytes": 24 << 20},
        exit_code=0,
    )
    failed = Report(
        verdict="shm_exhausted",
        findings=[
            {"id": "shm_exhausted", "severity": "critical", "title": "s"},
            {"id": "worker_died", "severity": "warning", "title": "w"},
        ],
        loaders=[loader(1, 2, 5), loader(2, 3, 4)],
        system={"usable_cpus": 4.0},
        exit_code=1,
    )
    job = merge_reports([slow, failed], ["node0", "node1"])
    assert job.verdict == "shm_exhausted"  # the slowest node (node0) says healthy
    assert [n["node"] for n in job.nodes] == ["node0", "node1"]  # the slowest rank's first
    assert [(f["id"], f["node"]) for f in job.findings] == [
        ("shm_exhausted", "node1"),
        ("thread_oversubscription", "node0"),
        ("worker_died", "node1"),
    ]
    assert job.nodes[0]["budgets"] == {
        "main_processes": 2,
        "workers": 4,
        "usable_cpus": 4.0,
        "shm_in_flight_bytes": float(28 << 20),  # 7 batches of 2 MiB per rank, two ranks
        "shm_free_bytes": 24 << 20,
    }
    assert "the slowest rank is node0 \u00b7 rank 0 \u00b7 loader 1" in job.notes[0], job.notes
    assert "2 main processes and 4 workers on 4 usable CPUs" in job.notes[1], job.notes
    assert job.exit_code == 1
    # The same decision straight from the binding: indices into what it was given.
    d = _ext.merge_nodes(
        [{"name": "a", "verdict": "unknown", "findings": [], "loaders": [], "system": {}}]
    )
    assert d["verdict"] == "unknown" and d["slowest"] is None and d["findings"] == []


def test_the_html_hang_section_names_the_ranks(tmp_path):
    """The HTML report's hang section labels what it shows as the terminal does: the stuck
    rank's loader and worker, the other rank's main process waiting for it (worker_hang's
    waiting ranks), the stuck rank's processes first."""
    pytest.importorskip("plotly")
    from dldoctor.report import Report
    from dldoctor.reporters import html

    r = run_entry(catalog.by_name("worker_hang/ranks"), tmp_path)
    assert r.returncode == 124, r.stderr
    out = tmp_path / "hang.html"
    html.write(str(out), Report.from_dict(r.report))
    page = out.read_text()
    hang = page[page.index("<h2>Hang</h2>") :]
    assert "rank 1 \u00b7 loader 1 stopped; waiting for it: rank 0 (pid " in hang, hang[:2000]
    assert "rank 1 \u00b7 loader 1 worker 0" in hang
    assert "rank 0 \u00b7 main process, waiting for rank 1 \u00b7 loader 1" in hang
    assert "rank 1 \u00b7 main process" in hang
    # The stuck rank's captures before the waiting rank's.
    assert hang.index("rank 1 \u00b7 loader 1 worker 0") < hang.index("rank 0 \u00b7 main process")
