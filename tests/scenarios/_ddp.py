"""The data-parallel side of the multi-rank scenarios, run under torchrun
(`python -m torch.distributed.run --nproc-per-node 2 tests/scenarios/<script>.py ...`): each
rank trains a small model under DistributedDataParallel over gloo (CPU), fed by its own
DataLoader, and every step's gradients are all-reduced across the ranks, so the ranks move in
lockstep as on GPUs.
"""

from __future__ import annotations

import os
import time

import torch
import torch.distributed as dist
from _common import MODEL_STEP_S
from torch.nn.parallel import DistributedDataParallel


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def start() -> None:
    """Join the process group (before a DistributedSampler is made: it asks for the ranks)."""
    torch.set_num_threads(1)
    dist.init_process_group("gloo")


def train(loader, seconds: float, width: int) -> int:
    """Iterate like a data-parallel training loop for `seconds` (the ranks stop together)."""
    try:
        model = DistributedDataParallel(torch.nn.Linear(width, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        start, n, done = time.monotonic(), 0, torch.zeros(1)
        while not done.item():
            for batch in loader:
                opt.zero_grad()
                time.sleep(MODEL_STEP_S)  # the accelerator's share of the step
                model(batch.float() / 1e6).sum().backward()  # gradients all-reduced here
                opt.step()
                n += 1
                # The ranks stop together: one that stopped alone would leave the other's
                # all-reduce without a peer.
                done.fill_(float(time.monotonic() - start > seconds))
                dist.all_reduce(done, op=dist.ReduceOp.MAX)
                if done.item():
                    break
        print(f"rank {rank()} batches:", n, flush=True)
        return n
    finally:
        dist.destroy_process_group()
