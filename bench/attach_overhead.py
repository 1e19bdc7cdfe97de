"""What `dldoctor attach` costs the job it watches (issue 13: the target keeps >= 98% of its
unattached throughput):

    python bench/attach_overhead.py [--rounds 7] [--seconds 10] [--kind typical|tiny]

One job runs for the whole bench, started without dldoctor: a DataLoader with 2 workers
iterated as fast as it goes (no training step), so it keeps both cores busy and every cycle
the attach spends is taken from it: the worst case. It reports its batch count 20 times a
second. The bench alternates unattached stretches and attaches, U A U A ... A U: each
`dldoctor attach PID --seconds S` is measured from its start to its exit, report included,
against the mean of the unattached stretches of the same length just before and just after
it (a drift of the machine's speed cancels out); the figure is the median of the rounds'
attached/unattached ratios. Also printed: the CPU the attach used (dldoctor and its py-spy
readers, from their rusage) against the job's own over the same stretch ("kept": job CPU /
(job + attach CPU), the conservative figure when the neighbours make the wall ratio swing),
and the machine's load average. dldoctor runs as pip installs it, its modules byte-compiled
(PYTHONDONTWRITEBYTECODE is dropped from its environment; a first short attach, not
counted, writes the bytecode and warms the page cache).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time

BUDGET = 0.98

JOB = r"""
import os, sys, time
import torch
from torch.utils.data import DataLoader, Dataset

kind = sys.argv[1]

class Tiny(Dataset):  # almost no work per sample: thousands of batches/s
    def __len__(self):
        return 1 << 40
    def __getitem__(self, i):
        return i

class Typical(Dataset):  # 4 KiB samples, batch 64
    def __init__(self):
        self.base = torch.arange(1024, dtype=torch.float32)
    def __len__(self):
        return 1 << 30
    def __getitem__(self, i):
        return self.base + i

if kind == "tiny":
    loader = DataLoader(Tiny(), batch_size=8, num_workers=2)
else:
    loader = DataLoader(Typical(), batch_size=64, num_workers=2)
n, last = 0, 0.0
for batch in loader:
    n += 1
    now = time.monotonic()
    if now - last >= 0.05:
        last = now
        print(f"{now:.6f} {n}", flush=True)
"""


class Job:
    """The job, and its (time, batches) reports as they come."""

    def __init__(self, kind: str):
        self.points: list[tuple[float, int]] = []
        self.proc = subprocess.Popen(
            [sys.executable, "-c", JOB, kind],
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,  # its workers' complaints when stop() kills it
            text=True,
            start_new_session=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            t, n = line.split()
            self.points.append((float(t), int(n)))

    def batches_at(self, t: float) -> float:
        pts = self.points
        before = [p for p in pts if p[0] <= t]
        after = [p for p in pts if p[0] >= t]
        if not before or not after:
            raise RuntimeError("the job reported nothing around that time")
        (t0, n0), (t1, n1) = before[-1], after[0]
        return n0 if t1 == t0 else n0 + (n1 - n0) * (t - t0) / (t1 - t0)

    def rate(self, a: float, b: float) -> float:
        time.sleep(0.2)  # the report after b
        return (self.batches_at(b) - self.batches_at(a)) / (b - a)

    def cpu_s(self) -> float:
        """CPU time of the job's main process and its workers so far."""
        total = 0.0
        for pid in [self.proc.pid, *children(self.proc.pid)]:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    fields = f.read().rpartition(")")[2].split()
                total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
            except (OSError, ValueError, IndexError):
                pass
        return total

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rpartition(")")[2].split()[1]) == pid:
                        out.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return out


def attached(job: Job, seconds: float, folder: str) -> tuple[float, float, float, str]:
    """One attach: its stretch (start, end), its CPU (dldoctor and py-spy), its verdict."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = os.path.join(folder, "report.json")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    start = time.monotonic()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "dldoctor",
            "attach",
            str(job.proc.pid),
            "--seconds",
            str(seconds),
            "--json",
            out,
        ],
        capture_output=True,
        text=True,
        env=env,
    )
    end = time.monotonic()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if r.returncode != 0:
        raise RuntimeError(f"attach failed: {r.stderr[-2000:]}")
    import json

    with open(out) as f:
        verdict = json.load(f)["verdict"]
    return start, end, cpu, verdict


def unattached(job: Job, seconds: float) -> float:
    a = time.monotonic()
    time.sleep(seconds)
    return job.rate(a, time.monotonic())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--seconds", type=float, default=10.0, help="the attach window")
    ap.add_argument("--kind", choices=("typical", "tiny"), default="typical")
    args = ap.parse_args()

    job = Job(args.kind)
    ratios, kept, load = [], [], []
    try:
        time.sleep(8)  # torch imported, workers started, the loop at its pace
        with tempfile.TemporaryDirectory() as folder:
            attached(job, 1.0, folder)  # bytecode written, page cache warm: not counted
            before = unattached(job, args.seconds + 1.5)  # about an attach's length
            for r in range(args.rounds):
                cpu_before = job.cpu_s()
                a, b, cpu, verdict = attached(job, args.seconds, folder)
                job_cpu = job.cpu_s() - cpu_before
                rate = job.rate(a, b)
                span = b - a
                after = unattached(job, span)
                base = (before + after) / 2
                ratios.append(rate / base)
                kept.append(job_cpu / (job_cpu + cpu))
                load.append(os.getloadavg()[0])
                print(
                    f"round {r + 1}: unattached {before:.0f} and {after:.0f} batches/s, attached "
                    f"{rate:.0f} ({ratios[-1]:.3f}); attach CPU {cpu:.2f} s over {span:.1f} s, "
                    f"job CPU {job_cpu:.1f} s (kept {kept[-1]:.3f}); verdict {verdict}; "
                    f"load {load[-1]:.1f}",
                    flush=True,
                )
                before = after
    finally:
        job.stop()
    med = statistics.median(ratios)
    print(
        f"\n{args.kind}: attached/unattached throughput, median of {len(ratios)} rounds: "
        f"{med:.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); CPU kept "
        f"{statistics.median(kept):.3f}; load {min(load):.1f}-{max(load):.1f}; budget {BUDGET}"
    )
    return 0 if med >= BUDGET else 1


if __name__ == "__main__":
    sys.exit(main())
