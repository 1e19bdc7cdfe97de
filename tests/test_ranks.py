"""Multi-rank jobs: the rank each main process reads from its environment (torchrun,
Lightning, accelerate, SLURM, Open MPI), and how reports name a rank's loader. The real
torchrun jobs are scenarios (tests/scenarios/catalog.py, `"ranks": 2`)."""

from __future__ import annotations

import pytest

from dldoctor import ranks
from dldoctor.report import loader_label, loader_labels
from doctor_run import run_doctor, scenario


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
