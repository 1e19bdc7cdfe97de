"""What watching a whole job costs, `dldoctor run` end to end (DESIGN.md section 6: a watched
loop keeps >= 98% of its unwatched throughput on a tiny-batch worst case, >= 99.5% on a
typical one), and what `--live` and `--trace` add to a plain `run`:

    python bench/overhead.py [--rounds 5] [--kinds tiny-0,tiny-2] [--modes unwatched,run,...]

Cases: tiny-0 (batch_size 8 of ints, num_workers=0: ~80,000 batches/s on an idle machine,
the hooks' worst case), tiny-2 (the same with 2 fork workers: bound by PyTorch's
inter-process transfer), typical (4 KiB samples, batch 64, 2 workers). Each round runs the
same job unwatched and under each dldoctor mode, in an order that alternates between rounds,
all in a pseudo-terminal (`--live` needs one; the others get the same conditions). The load
average is printed before and after: on a shared machine it says how far to trust a round.
The job times its own steady loop (after a warm-up) and reports batches/s and the CPU time
over that loop of its own processes (main and workers) and of the watcher (the dldoctor
process: drain, sampler, watchdog, the Python loop and the live panel; the job's parent, read
from /proc). Three figures per mode:
- wall ratio: the job's batches/s against the unwatched run of the same round (median of
  the rounds). On a shared 2-core machine it swings by +-10% or more with the neighbours:
  each round's ratio is printed too;
- steady: the same ratio of the loop's fast blocks (the job times its loop in BLOCKS blocks;
  the tenth-fastest of a run stands for it: a neighbour only ever slows a block down), the
  budget's figure (ok/OVER);
- kept: job CPU / (job CPU + watcher CPU) per batch, same run: every cycle the watcher
  spends counted as if it were on the critical path, which on a job that keeps every core
  busy it is. The steady, conservative figure (a job's CPU per batch itself swings with
  contention, so comparing it across runs is as noisy as the wall ratio); the hooks' own
  cost per batch, inside the job, is measured directly by bench/hooks_ab.py (and one event's
  by bench/event_python.py). `vs run` is what --live and --trace add; the mode
  `run-hooks-out` (the job takes the hooks out at its start, the watcher still samples it)
  is what the watcher's sampling costs the job apart from the hooks.

With --interleaved, one job runs for the whole bench under `dldoctor run` and alternates
epochs between unwatched and watched, U W W U U W ...: an unwatched epoch has every patch of
dldoctor put back to torch's original and the watcher (the job's parent) stopped with
SIGSTOP, so nothing of dldoctor runs anywhere; a watched one has the patches as installed and
the watcher running (the catch-up after its stop lands on the watched side: conservative).
Each epoch makes a new iterator (its workers fork under its side) and times a block of
batches after its start-up. Two runs of the same job minutes apart differ by more than the
cost measured; two epochs a second apart far less. Figures: the throughput kept (all the
unwatched epochs' time over all the watched ones', the budget's figure) with a bootstrap 90%
interval over the rounds, the median of the rounds' paired ratios, the CPU kept (job and
watcher, every thread, per batch) and the watcher's share of a core. `--parts hooks` or
`--parts watcher` takes only that part out of an unwatched epoch: what each costs alone
(`--parts worker-hooks`: only the hooks in the workers, in fork workers; `--parts none`: an
A/A run, both sides watched, what the method itself reads). `--one-epoch` forks no workers
between a side's blocks: each side keeps one iterator, made under it, for 15,000 batches (a
loader's steady state, as in one long epoch), then a new pair is made, the sides in the other
order (with one pair for the whole job, one job read 0.96 and the next 0.98: a pair's lot
stays with it). Its blocks are short (tiny-2: 100 batches a side, 1,200 rounds), which
narrows a job's interval to about +-1 point.

    python bench/overhead.py --interleaved [--kinds tiny-0,tiny-2] [--rounds N] [--parts all]
        [--jobs N]

`--jobs N` runs the interleaved job N times, one after the other, and pools them: two jobs of
one build minutes apart differ by more than one job's interval says (a fresh process, its
memory laid out anew, other neighbours), so the pooled interval resamples jobs, then rounds.

Reuses the approach of bench/event_python.py (alternating rounds, median pair ratio, CPU
figures as the conservative check).
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading

import torch
from torch.utils.data import DataLoader, Dataset

# The job times its loop in this many blocks (the steady figure).
BLOCKS = 100
# Budget (DESIGN.md section 6) and timed batches per run (a few seconds of loop each).
CASES = {"tiny-0": (0.98, 240_000), "tiny-2": (0.98, 12_000), "typical": (0.995, 3_000)}
MODES = {
    "unwatched": None,
    "run": [],
    "run --trace": ["--trace", "{tmp}/t.json"],
    "run --live": ["--live"],
    "run --live --trace": ["--live", "--trace", "{tmp}/t.json"],
    # The watcher watching a job whose hooks are taken out at its start: what the watcher's
    # sampling of /proc costs the job, apart from the hooks.
    "run-hooks-out": [],
}
HOOKS_OUT_ENV = "DLDOCTOR_BENCH_HOOKS_OUT"
PIN_ENV = "DLDOCTOR_BENCH_PIN"

BENCH = os.path.dirname(os.path.abspath(__file__))


class Tiny(Dataset):
    """The worst case: almost no work per sample, thousands of batches/s."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return i


class Typical(Dataset):
    """4 KiB samples, batch 64."""

    def __init__(self, n: int):
        self.n = n
        self.base = torch.arange(1024, dtype=torch.float32)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return self.base + i


def make_loader(kind: str, batches: int):
    """The case's DataLoader over `batches` batches."""
    if kind == "tiny-0":
        return DataLoader(Tiny(batches * 8), batch_size=8, num_workers=0)
    if kind == "tiny-2":
        return DataLoader(
            Tiny(batches * 8), batch_size=8, num_workers=2, multiprocessing_context="fork"
        )
    return DataLoader(
        Typical(batches * 64), batch_size=64, num_workers=2, multiprocessing_context="fork"
    )


def pin(it, cpus: list[int]) -> None:
    """--pin: this (main) process on the first of `cpus`, the iterator's workers on the
    second; the same placement on both sides of a comparison."""
    os.sched_setaffinity(0, cpus[:1])
    for w in getattr(it, "_workers", ()):
        os.sched_setaffinity(w.pid, cpus[1:2])


JOB = r"""
import json, os, sys, time
sys.path.insert(0, {bench!r})
from overhead import make_loader, pin

kind, batches, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if os.environ.get("{hooks_out}"):
    from dldoctor.job import hooks
    hooks.uninstall()
WARMUP = 200
BLOCKS = {blocks}
loader = make_loader(kind, batches + WARMUP + 100)
def cpu_of(pid):
    # utime + stime of a whole process, from /proc (10 ms ticks: the loop runs for seconds).
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

it = iter(loader)
if os.environ.get("{pin}"):
    pin(it, sorted(os.sched_getaffinity(0)))
for _ in range(WARMUP):
    next(it)
# The job's CPU over the timed loop: this process and its workers. The watcher is the job's
# parent under `dldoctor run`: its CPU over the same loop is what it can take from the job
# (its startup and the final report stay out of it).
job = [os.getpid()] + [w.pid for w in getattr(it, "_workers", ())]
watched = bool(os.environ.get("DLDOCTOR_RING"))
# The loop is timed in blocks too: a neighbour on a shared machine only ever slows a block
# down, so the fastest blocks show the steady cost per batch (timeit's argument for the min).
block = max(1, batches // BLOCKS)
clock = time.perf_counter
blocks = []
j0, p0, t0 = sum(map(cpu_of, job)), cpu_of(os.getppid()) if watched else 0.0, clock()
tb = t0
for _ in range(batches // block):
    for _ in range(block):
        next(it)
    t = clock()
    blocks.append(t - tb)
    tb = t
for _ in range(batches % block):
    next(it)
dt = clock() - t0
j1, p1 = sum(map(cpu_of, job)), cpu_of(os.getppid()) if watched else 0.0
del it
with open(out, "w") as f:
    json.dump({
        "batches_per_s": batches / dt,
        # The tenth-fastest in a hundred (a single lucky block does not decide).
        "steady_batches_per_s": block / sorted(blocks)[len(blocks) // 10],
        "job_cpu_us_per_batch": (j1 - j0) / batches * 1e6,
        "watcher_cpu_us_per_batch": (p1 - p0) / batches * 1e6 if watched else None,
        "watcher_cpu_pct": 100 * (p1 - p0) / dt if watched else None,
    }, f)
"""


def run_in_pty(
    cmd: list[str], cols: int = 120, rows: int = 40, timeout: float = 300, env_extra=None
) -> int:
    """Runs `cmd` with a pseudo-terminal as its stdin, stdout and stderr; drains the output."""
    import fcntl
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    env = dict(os.environ, TERM="xterm-256color", COLUMNS=str(cols), LINES=str(rows))
    env.update(env_extra or {})

    def drain():
        while True:
            try:
                if not os.read(master, 65536):
                    return
            except OSError:
                return

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    # A new session makes the pty the command's controlling terminal, as a user's shell would.
    p = subprocess.Popen(
        cmd, stdin=slave, stdout=slave, stderr=slave, env=env, start_new_session=True
    )
    os.close(slave)
    try:
        rc = p.wait(timeout=timeout)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        t.join(timeout=5)
        os.close(master)
    return rc


def one(mode: str, kind: str, batches: int, tmp: str, job: str, pinned: bool = False) -> dict:
    out = os.path.join(tmp, "result.json")
    if os.path.exists(out):
        os.remove(out)
    job_cmd = [sys.executable, job, kind, str(batches), out]
    extra = MODES[mode]
    if extra is None:
        cmd = job_cmd
    else:
        cmd = [
            sys.executable,
            "-m",
            "dldoctor",
            "run",
            "-q",
            *[a.format(tmp=tmp) for a in extra],
            "--",
            *job_cmd,
        ]
    env = {HOOKS_OUT_ENV: "1"} if mode == "run-hooks-out" else {}
    if pinned:
        env[PIN_ENV] = "1"
    rc = run_in_pty(cmd, env_extra=env)
    if rc != 0 or not os.path.exists(out):
        raise SystemExit(f"{mode}: exit {rc}, no result")
    with open(out) as f:
        return json.load(f)


# --interleaved: batches a side after `settle` of start-up, and rounds, by case.
INTERLEAVED = {"tiny-0": (2000, 100, 300), "tiny-2": (1500, 200, 60), "typical": (200, 20, 100)}
# --one-epoch: the same, in short blocks. A tiny-2 round's ratio spreads as wide at 100
# batches a side (~0.13 s) as at 1,500 (0.90-1.10 quartiles either way), so ten times the rounds
# in the same time narrow a job's interval about threefold: +-1 point in ~5 minutes, where
# 60 rounds of 1,500 gave +-5 (A/A jobs, 2026-12-07).
ONE_EPOCH = {**INTERLEAVED, "tiny-2": (100, 200, 1200)}
# --one-epoch, the hooks out of one side: batches a side that a pair of loaders serves before a
# new pair is made (new_pair). Whatever the block: what a new worker costs the watcher (found,
# read afresh, its memory walked once it is 2 s old) belongs to a worker's start, not to a
# loader's steady state, and a pair renewed every 10 blocks of 100 batches (~3 s) charged it to
# the watched side: 0.974 kept, against 0.977-0.984 with pairs of 15,000 batches.
PAIR_BATCHES = 15_000


def interleaved_job(
    kind: str,
    rounds: int,
    block: int,
    settle: int,
    out: str,
    parts: str = "all",
    pinned: bool = False,
    one_epoch: bool = False,
) -> None:
    """The job of --interleaved, run under `dldoctor run`: epochs alternate between unwatched
    (every patch of dldoctor put back to torch's original and the watcher, this process's
    parent, stopped with SIGSTOP: nothing of dldoctor runs anywhere) and watched (the patches
    as installed, the watcher running). Each epoch makes a new iterator (forks its workers
    under its side) and times `block` batches after `settle` of start-up. `pinned`: the main
    process on the first CPU it may use, its workers on the second, in every epoch alike.
    `one_epoch`: no new workers each side: what a loader's steady state pays, as in one long
    epoch. With `parts` watcher, one iterator for the whole bench, whose blocks alternate with
    the watcher stopped and running. Else each side has its own loader and iterator, made
    under that side (the workers' hooks cannot be taken out mid-epoch: the unwatched side's
    workers fork with every patch put back and stay so), anew every PAIR_BATCHES batches a side,
    and the blocks alternate between the two, the main process's patches and the watcher switched
    with each."""
    import signal
    import time

    from dldoctor.job.install import PATCHES

    patches = list(PATCHES.applied)
    if not patches:
        raise SystemExit("overhead: the hooks are not installed (run it under dldoctor run)")
    watcher = os.getppid()
    # --one-epoch with the hooks out of one side: two loaders side by side, each made and
    # started under its own side.
    two = one_epoch and parts != "watcher"
    pair_rounds = max(1, PAIR_BATCHES // block)
    loader = (
        None if two else make_loader(kind, settle + block * (2 * rounds + 2 if one_epoch else 1))
    )
    cpus = sorted(os.sched_getaffinity(0))
    if pinned and len(cpus) < 2:
        raise SystemExit("overhead: --pin needs 2 CPUs")

    from dldoctor.job import worker as job_worker

    real_begin = job_worker.begin

    def use(watched: bool) -> None:
        # What an unwatched epoch takes out (--parts): the hooks, the watcher, or both; or
        # only the workers' hooks (the _worker_loop hook put back and the worker_init_fn
        # chain's fallback made a no-op: the workers fork from this state and stay unhooked).
        if watched:
            for owner, name, _orig, wrapper in patches:
                setattr(owner, name, wrapper)
            job_worker.begin = real_begin
            os.kill(watcher, signal.SIGCONT)
            return
        if parts == "none":  # an A/A run: both sides watched, what the method itself reads
            return
        if parts == "worker-hooks":
            for owner, name, orig, _wrapper in patches:
                if name == "_worker_loop":
                    setattr(owner, name, orig)
            job_worker.begin = lambda *args: None
            return
        if parts in ("all", "watcher"):
            os.kill(watcher, signal.SIGSTOP)
            _wait_stopped(watcher)
        if parts in ("all", "hooks"):
            for owner, name, orig, _wrapper in patches:
                setattr(owner, name, orig)

    def start(of=None):  # a new iterator (its workers forked now), settled
        if pinned:
            os.sched_setaffinity(0, cpus)  # the workers fork with both, then move
        it = iter(of if of is not None else loader)
        if pinned:
            pin(it, cpus)
        for _ in range(settle):
            next(it)
        return it, [os.getpid(), watcher, *(w.pid for w in getattr(it, "_workers", ()))]

    def side_start(watched: bool):  # --one-epoch with two loaders: this side's, made under it
        use(watched)
        return start(make_loader(kind, settle + block * (pair_rounds + 1)))

    def new_pair(n: int) -> dict:
        # A pair of loaders serves PAIR_BATCHES batches a side, then a new one is made, the sides
        # made in the other order: a pair's own lot (where its workers' memory and caches
        # fall, which side forked first) stays with it for its whole life, and moved one job's
        # figure by +-2 points against the next; over many pairs it averages out.
        use(True)  # the old pair ends as in a run: its hooks in place, the watcher running
        sides.clear()  # its workers exit before the new pair forks
        order = (False, True) if n % 2 == 0 else (True, False)
        made = {w: side_start(w) for w in order}
        return {"unwatched": made[False], "watched": made[True]}

    rows = []
    clock = time.perf_counter_ns
    sides = {}
    if one_epoch and not two:
        it, pids = start()
    try:
        for r in range(rounds + 1):
            if two and r % pair_rounds == 0:
                it = pids = None  # the loop's last reference to the old pair
                sides = new_pair(r // pair_rounds)
            for side in ("unwatched", "watched") if r % 2 == 0 else ("watched", "unwatched"):
                use(side == "watched")
                if two:
                    it, pids = sides[side]
                elif not one_epoch:
                    it, pids = start()
                c, cw, cm, t = sum(map(cpu_ns, pids)), cpu_ns(watcher), cpu_ns(pids[0]), clock()
                for _ in range(block):
                    next(it)
                t = clock() - t
                c, cw = sum(map(cpu_ns, pids)) - c, cpu_ns(watcher) - cw
                cm = cpu_ns(pids[0]) - cm
                if not one_epoch:
                    del it
                if r:  # round 0 warms both sides up
                    rows.append(
                        {
                            "round": r,
                            "side": side,
                            "wall_ns": t,
                            "cpu_ns": c,
                            "watcher_ns": cw,
                            "main_ns": cm,
                            "workers_ns": c - cw - cm,
                        }
                    )
    finally:
        use(True)
        sides.clear()
    with open(out, "w") as f:
        json.dump({"block": block, "rows": rows}, f)


def _wait_stopped(pid: int, limit_s: float = 2.0) -> None:
    """Until process `pid` is stopped (SIGSTOP is delivered asynchronously)."""
    import time

    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("T", "t"):
                    return
        except OSError:
            return
        time.sleep(0.0005)


def cpu_ns(pid: int) -> int:
    """CPU time of every thread of process `pid` so far, in ns (0 once it is gone)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            pass
    return total


def interleaved(
    kind: str,
    rounds: int | None,
    block: int | None,
    budget: float,
    parts: str = "all",
    pinned: bool = False,
    one_epoch: bool = False,
) -> list[tuple[dict, dict]]:
    """Runs interleaved_job under `dldoctor run`, prints its figures and returns its rounds'
    (unwatched, watched) pairs."""
    import random
    import signal

    d_block, settle, d_rounds = (ONE_EPOCH if one_epoch else INTERLEAVED)[kind]
    block, rounds = block or d_block, rounds or d_rounds
    with tempfile.TemporaryDirectory(prefix="dldoctor-overhead-") as tmp:
        out = os.path.join(tmp, "result.json")
        cmd = [sys.executable, "-m", "dldoctor", "run", "-q", "--", sys.executable]
        cmd += [os.path.abspath(__file__), "--interleaved-job", out, "--kinds", kind]
        cmd += ["--rounds", str(rounds), "--block", str(block), "--settle", str(settle)]
        cmd += ["--parts", parts] + (["--pin"] if pinned else [])
        cmd += ["--one-epoch"] if one_epoch else []
        # A session of its own: the job stops its watcher (SIGSTOP) for the unwatched side, and
        # a process group with a stopped member that becomes orphaned (the shell that started
        # the bench exits, as a background job's does) gets SIGHUP from the kernel: the job
        # then dies with exit 129 before its first loader.
        p = subprocess.Popen(
            cmd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        try:
            _, err = p.communicate(timeout=3600)
        finally:
            if p.poll() is None:  # the job may have left the watcher stopped
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
                p.wait()
        if not os.path.exists(out):
            sys.stderr.write(err[-4000:])
            raise SystemExit(f"overhead: the interleaved job failed (exit {p.returncode})")
        with open(out) as f:
            rows = json.load(f)["rows"]
    by_round: dict[int, dict[str, dict]] = {}
    for row in rows:
        by_round.setdefault(row["round"], {})[row["side"]] = row
    pairs = [(x["unwatched"], x["watched"]) for x in by_round.values()]

    def kept(ps, key):  # unwatched / watched time per batch over all the pairs: throughput
        return sum(u[key] for u, _ in ps) / sum(w[key] for _, w in ps)

    wall, cpu = kept(pairs, "wall_ns"), kept(pairs, "cpu_ns")
    ratios = sorted(u["wall_ns"] / w["wall_ns"] for u, w in pairs)
    n = len(ratios)
    rng = random.Random(1)
    boot = sorted(kept(rng.choices(pairs, k=n), "wall_ns") for _ in range(2000))
    per = {
        s: statistics.median(x[s]["wall_ns"] for x in by_round.values()) / block
        for s in ("unwatched", "watched")
    }
    print(
        f"== interleaved, {kind} job under dldoctor run: {n} rounds of {block} batches a side "
        f"(after {settle} of start-up){', pinned' if pinned else ''}"
        f"{', in one epoch' if one_epoch else ''}, {parts} taken out of an unwatched side; "
        f"budget >= {budget:.1%}"
    )
    print(
        f"  unwatched {per['unwatched'] / 1000:.1f} us a batch, watched "
        f"{per['watched'] / 1000:.1f} us (medians)"
    )
    verdict = "ok" if wall >= budget else "OVER"
    print(
        f"  throughput kept (all rounds' unwatched / watched time): {wall:.4f}  {verdict}\n"
        f"    bootstrap 90% interval {boot[100]:.4f}-{boot[1899]:.4f}; median of the rounds' "
        f"ratios {ratios[n // 2]:.4f} (quartiles {ratios[n // 4]:.3f}-{ratios[3 * n // 4]:.3f})"
    )
    w_ns = sum(w["watcher_ns"] for _, w in pairs)
    w_s = sum(w["wall_ns"] for _, w in pairs)
    wall_of = {s: sum(x[s]["wall_ns"] for x in by_round.values()) for s in ("unwatched", "watched")}
    busy = {
        s: [sum(x[s][k] for x in by_round.values()) / wall_of[s] for k in ("main_ns", "workers_ns")]
        for s in ("unwatched", "watched")
    }
    # num_workers=0: the workers' figures are differences of nothing (noise of either sign).
    has_workers = busy["unwatched"][1] > 0.01
    main = kept(pairs, "main_ns")
    workers = f", workers {kept(pairs, 'workers_ns'):.4f}" if has_workers else ""
    print(
        f"  CPU kept (job and watcher, every thread, per batch): {cpu:.4f} (main process "
        f"{main:.4f}{workers}); the watcher used {100 * w_ns / w_s:.2f}% of a "
        "core in the watched epochs"
    )
    # Under --pin the main process has a core and the workers the other: the busier one sets
    # the pace when it is near 1; tiny-2 keeps both near 0.6, bound by the hand-over of each
    # batch between the processes (a wake-up on each side), not by either's CPU.
    busy_workers = (
        f", workers {busy['unwatched'][1]:.2f} / {busy['watched'][1]:.2f}" if has_workers else ""
    )
    print(
        "  cores busy (CPU time over wall time), unwatched / watched: main process "
        f"{busy['unwatched'][0]:.2f} / {busy['watched'][0]:.2f}{busy_workers}"
    )
    return pairs


def pooled(jobs: list[list[tuple[dict, dict]]], budget: float) -> None:
    """The figure over several jobs of one case (--jobs): all their rounds' unwatched time
    over their watched time. Two jobs of the same build minutes apart differ by more than a
    job's own interval says (each is a fresh process, its memory laid out anew, beside other
    neighbours), so the interval resamples the jobs, then the rounds within each."""
    import random

    def kept(ps):
        return sum(u["wall_ns"] for u, _ in ps) / sum(w["wall_ns"] for _, w in ps)

    rng = random.Random(1)
    boot = sorted(
        kept([p for job in rng.choices(jobs, k=len(jobs)) for p in rng.choices(job, k=len(job))])
        for _ in range(2000)
    )
    each = ", ".join(f"{kept(job):.4f}" for job in jobs)
    total = kept([p for job in jobs for p in job])
    print(
        f"== pooled over {len(jobs)} jobs ({each}): throughput kept {total:.4f}  "
        f"{'ok' if total >= budget else 'OVER'}\n"
        f"    bootstrap 90% interval (jobs, then rounds) {boot[100]:.4f}-{boot[1899]:.4f}"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, help="default: 5; --interleaved: by case")
    ap.add_argument("--batches", type=int, help="timed batches per run (default: per case)")
    ap.add_argument(
        "--kinds", default="tiny-0,tiny-2", help="comma-separated, of: " + ", ".join(CASES)
    )
    ap.add_argument(
        "--modes", default=",".join(MODES), help="comma-separated, of: " + ", ".join(MODES)
    )
    ap.add_argument(
        "--interleaved",
        action="store_true",
        help="alternate unwatched and watched epochs in one watched job (the budget's figure)",
    )
    ap.add_argument("--block", type=int, help="--interleaved: timed batches a side (by case)")
    ap.add_argument("--settle", type=int, help=argparse.SUPPRESS)
    ap.add_argument(
        "--parts",
        choices=("all", "hooks", "watcher", "worker-hooks", "none"),
        default="all",
        help="--interleaved: what an unwatched epoch takes out (default: all; none: an A/A run)",
    )
    ap.add_argument(
        "--pin",
        action="store_true",
        help="the main process on one CPU, its workers on another, in every run or epoch "
        "alike (a run's wall time then does not swing with where the scheduler puts them)",
    )
    ap.add_argument(
        "--one-epoch",
        action="store_true",
        help="--interleaved: no new workers each side, a loader's steady state (--parts "
        "watcher: one iterator, the watcher stopped and running; else one iterator a side, "
        "each made under its side, blocks alternating between them; tiny-2: 1,200 rounds of "
        "100 batches a side)",
    )
    ap.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="--interleaved: run the job this many times, one after the other, and pool them",
    )
    ap.add_argument("--interleaved-job", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.interleaved_job:
        interleaved_job(
            args.kinds,
            args.rounds,
            args.block,
            args.settle,
            args.interleaved_job,
            args.parts,
            args.pin,
            args.one_epoch,
        )
        return 0
    if args.interleaved:
        print(f"== load before: {_loadavg()}")
        for kind in [k.strip() for k in args.kinds.split(",")]:
            if kind not in CASES:
                raise SystemExit(f"unknown case {kind!r}")
            budget = CASES[kind][0]
            jobs = [
                interleaved(
                    kind, args.rounds, args.block, budget, args.parts, args.pin, args.one_epoch
                )
                for _ in range(args.jobs)
            ]
            if len(jobs) > 1:
                pooled(jobs, budget)
        print(f"== load after: {_loadavg()}")
        return 0
    modes = [m.strip() for m in args.modes.split(",")]
    if "unwatched" not in modes:
        modes.insert(0, "unwatched")
    for m in modes:
        if m not in MODES:
            raise SystemExit(f"unknown mode {m!r}")
    kinds = [k.strip() for k in args.kinds.split(",")]
    for k in kinds:
        if k not in CASES:
            raise SystemExit(f"unknown case {k!r}")
    print(f"== load before: {_loadavg()}")
    for kind in kinds:
        budget, default_batches = CASES[kind]
        measure(kind, args.rounds or 5, args.batches or default_batches, modes, budget, args.pin)
    print(f"== load after: {_loadavg()}")
    return 0


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            one, five, fifteen = f.read().split()[:3]
        return f"{one} {five} {fifteen} (1, 5, 15 min) on {os.cpu_count()} CPUs"
    except OSError:
        return "unknown"


def measure(
    kind: str, rounds: int, batches: int, modes: list[str], budget: float, pinned: bool = False
) -> None:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    tmp = tempfile.mkdtemp(prefix="dldoctor-overhead-")
    job = os.path.join(tmp, "job.py")
    with open(job, "w") as f:
        f.write(
            JOB.replace("{blocks}", str(BLOCKS))
            .replace("{hooks_out}", HOOKS_OUT_ENV)
            .replace("{pin}", PIN_ENV)
            .replace("{bench!r}", repr(BENCH))
        )
    results: dict[str, list[dict]] = {m: [] for m in modes}
    try:
        one("unwatched", kind, min(batches, 2000), tmp, job)  # warm the page cache
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            transient=True,
        ) as progress:
            task = progress.add_task("rounds", total=rounds * len(modes))
            for r in range(rounds):
                order = modes if r % 2 == 0 else list(reversed(modes))
                for m in order:
                    progress.update(task, description=f"round {r + 1}/{rounds}: {m}")
                    results[m].append(one(m, kind, batches, tmp, job, pinned))
                    progress.advance(task)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    base = results["unwatched"]
    print(
        f"== dldoctor run overhead, {kind} job, {rounds} rounds of "
        f"{batches} batches{', pinned' if pinned else ''}; budget >= {budget:.1%} of unwatched "
        "throughput"
    )
    print(
        f"  {'mode':19s} {'batches/s':>9s} {'wall ratio':>10s} {'steady':>7s} {'job CPU':>10s} "
        f"{'watcher CPU':>11s} {'':>10s} {'kept':>6s} {'vs run':>8s}"
    )
    run_watcher = None  # % of a core: the steadiest figure of all
    for m in modes:
        rs = results[m]
        bps = statistics.median(x["batches_per_s"] for x in rs)
        wall = statistics.median(x["batches_per_s"] / b["batches_per_s"] for x, b in zip(rs, base))
        steady = statistics.median(
            x["steady_batches_per_s"] / b["steady_batches_per_s"] for x, b in zip(rs, base)
        )
        job = statistics.median(x["job_cpu_us_per_batch"] for x in rs)
        if m == "unwatched":
            print(f"  {m:19s} {bps:9.0f} {1:10.3f} {1:7.3f} {job:7.0f} us")
            continue
        watcher = statistics.median(x["watcher_cpu_us_per_batch"] for x in rs)
        pct = statistics.median(x["watcher_cpu_pct"] for x in rs)
        # Same-run shares: the watcher's CPU against the job's, round by round.
        kept = statistics.median(
            x["job_cpu_us_per_batch"] / (x["job_cpu_us_per_batch"] + x["watcher_cpu_us_per_batch"])
            for x in rs
        )
        if m == "run":
            run_watcher = pct
        added = "" if run_watcher is None or m == "run" else f"{pct - run_watcher:+.2f}%"
        verdict = "ok" if steady >= budget else "OVER"
        print(
            f"  {m:19s} {bps:9.0f} {wall:10.3f} {steady:7.3f} {job:7.0f} us {watcher:8.1f} us "
            f"{pct:5.2f}% core {kept:6.2%} {added:>8s}  {verdict}"
        )
    for key, name in (("batches_per_s", "wall"), ("steady_batches_per_s", "steady")):
        for m in modes:
            if m != "unwatched":
                rs = [round(x[key] / b[key], 3) for x, b in zip(results[m], base)]
                print(f"  {m}: {name} ratio per round {rs}")
    print(
        "  wall ratio: median of batches/s against the same round's unwatched run (swings with "
        "the neighbours);\n  steady: the same of the loop's fast blocks (the tenth-fastest of "
        f"{BLOCKS} blocks of a run: a neighbour only ever\n  slows a block down), the budget's "
        "figure;\n  job CPU, watcher CPU: per batch over the timed loop; kept: job / "
        "(job + watcher), the throughput a job\n  that keeps every core busy keeps (the hooks' "
        "own per-batch cost is in bench/hooks_ab.py);\n  vs run: the watcher CPU a mode "
        "adds to a plain run, in % of one core"
    )


if __name__ == "__main__":
    sys.exit(main())
