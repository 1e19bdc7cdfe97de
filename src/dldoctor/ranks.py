"""Which rank a process is in a multi-rank job (torchrun, Lightning, accelerate, SLURM, Open
MPI): read from its environment, the one reading both sides use (the job's hooks for their
own process, `dldoctor attach` for /proc/<pid>/environ).
"""

from __future__ import annotations

import os
import sys

# Environment variables that name a process's rank, first found wins, as issue 12 lists them
# (accelerate and Lightning's launchers set torchrun's names).
RANK_VARS = {
    "rank": ("RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK"),
    "local_rank": ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"),
    "world_size": ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"),
    "local_world_size": ("LOCAL_WORLD_SIZE",),
    "group_rank": ("GROUP_RANK",),
}


def rank_of(env: dict[str, str] | None) -> dict:
    """{"rank": 0, "local_rank": 0, ...}: the rank variables of `env` that hold an integer."""
    out = {}
    env = env or {}
    for name, keys in RANK_VARS.items():
        for k in keys:
            v = env.get(k)
            if v is not None and v.strip().lstrip("-").isdigit():
                out[name] = int(v)
                break
    return out


def this_process() -> dict:
    """This process's rank: its environment, and torch.distributed's own answer once the
    process group is up (Lightning's first rank, started by the user, has no RANK variable).
    Only asked when the job already imported torch.distributed; never starts anything."""
    out = rank_of(os.environ)
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            out["rank"] = int(dist.get_rank())
            out["world_size"] = int(dist.get_world_size())
    except Exception:
        pass
    if "rank" not in out and "local_rank" not in out:
        return {}  # a job without ranks (WORLD_SIZE alone names none)
    return out
