"""Shared pieces of the scenario jobs: a training-like loop, cheap samples, CPU burners.

Each scenario in this folder is a real job with a real bottleneck (or its healthy twin),
runnable by hand (`python tests/scenarios/slow_getitem.py`) and under `dldoctor run`.
"""

from __future__ import annotations

import argparse
import os
import time

import torch
from torch.utils.data import Dataset


def parser(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    ap.add_argument("--seconds", type=float, default=8.0, help="how long the loop runs")
    ap.add_argument("--healthy", action="store_true", help="run the healthy twin")
    return ap


class Numbers(Dataset):
    """Cheap samples: sample i is a tensor of `width` copies of i."""

    def __init__(self, width: int = 8):
        self.width = width

    def __len__(self):
        return 1_000_000

    def __getitem__(self, i):
        return torch.full((self.width,), float(i))


def join_cgroup(path: str) -> None:
    """Moves this process (and so the workers it starts later) into the cgroup `path`."""
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write(str(os.getpid()))


def burn_cpu(seconds: float) -> int:
    """Pure-Python work for about `seconds` of one core (no sleeping, no I/O)."""
    end = time.thread_time() + seconds
    x = 0
    while time.thread_time() < end:
        for i in range(2000):
            x = (x * 31 + i) % 1000003
    return x


class Compute(Dataset):
    """Samples that each cost `cost_s` of CPU to make (a decode, a transform)."""

    def __init__(self, cost_s: float, width: int = 16):
        self.cost_s = cost_s
        self.width = width

    def __len__(self):
        return 100_000

    def __getitem__(self, i):
        burn_cpu(self.cost_s)
        return torch.full((self.width,), float(i))


# A training step that waits, as the main process does for a GPU: long enough that a healthy
# loader keeps up with it easily, short enough that a slow loader is clearly the bottleneck.
MODEL_STEP_S = 0.02


def model_step(batch) -> None:
    time.sleep(MODEL_STEP_S)


def consume(loader, seconds: float, step=model_step, epochs: int = 1000) -> int:
    """Iterate like a training loop for `seconds`; `step(batch)` is the model's work."""
    start = time.monotonic()
    n = 0
    for _ in range(epochs):
        for batch in loader:
            if step is not None:
                step(batch)
            n += 1
            if time.monotonic() - start > seconds:
                return n
    return n
