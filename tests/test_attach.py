"""`dldoctor attach PID`: real jobs started without dldoctor (the scenario scripts, a torchrun
job), attached to by pid while they run or while they are stuck; the pids it cannot diagnose
(no process, not Python, no DataLoader) and a user without the right to read the stacks."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from doctor_run import SCENARIOS

pytestmark = pytest.mark.scenario

WINDOW_S = "6"  # the attach window: 13-20 stack samples a second per process
WORKER_COMM = "pt_data_worker"


@dataclass
class Attached:
    returncode: int
    stderr: str
    report: dict | None
    stdout: str = ""

    def ids(self) -> list[str]:
        return [f["id"] for f in (self.report or {}).get("findings", [])]

    def finding(self, fid: str) -> dict:
        for f in (self.report or {}).get("findings", []):
            if f["id"] == fid:
                return f
        raise AssertionError(f"no {fid} finding; findings: {self.ids()}\n{self.stderr}")

    def loud(self) -> list[str]:
        return [
            f["id"]
            for f in (self.report or {}).get("findings", [])
            if f["severity"] in ("warning", "critical")
        ]

    def stacks_of(self, pid: int) -> list[dict]:
        for p in ((self.report or {}).get("hang") or {}).get("snapshot", {}).get("processes", []):
            if p["pid"] == pid:
                return p["stacks"]
        return []


def children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                if int(f.read().rpartition(")")[2].split()[1]) == pid:
                    out.append(int(name))
        except (OSError, ValueError, IndexError):
            pass
    return out


def comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def workers_under(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        for c in children(todo.pop()):
            todo.append(c)
            if comm(c) == WORKER_COMM:
                out.append(c)
    return out


@contextlib.contextmanager
def job(cmd: list[str], workers: int = 1, settle_s: float = 1.5) -> Iterator[subprocess.Popen]:
    """Starts `cmd` without dldoctor, in its own process group, and yields it once `workers`
    DataLoader workers run under it (and `settle_s` more, for the loop to reach its pace);
    ends the whole group afterwards."""
    proc = subprocess.Popen(
        cmd,
        cwd=SCENARIOS,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while len(workers_under(proc.pid)) < workers:
            if proc.poll() is not None:
                raise AssertionError(f"the job ended: {proc.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                raise AssertionError("the job's DataLoader workers never started")
            time.sleep(0.2)
        time.sleep(settle_s)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def scenario(name: str, *args: str) -> list[str]:
    return [sys.executable, os.path.join(SCENARIOS, name + ".py"), *args]


def attach(pid: int, tmp_path, *extra: str, prefix=(), seconds: str = WINDOW_S) -> Attached:
    out = os.path.join(str(tmp_path), f"attach-{pid}.json")
    cmd = [*prefix, sys.executable, "-m", "dldoctor", "attach", str(pid), "--seconds", seconds]
    cmd += ["--json", out, *extra]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    report = None
    if os.path.exists(out):
        with open(out) as f:
            report = json.load(f)
    return Attached(r.returncode, r.stderr, report, r.stdout)


def no_traceback(r: Attached) -> None:
    assert "Traceback" not in r.stderr, r.stderr


# -- hangs: the stuck worker named, with its stack -------------------------------------------


def test_collate_deadlock_lock_inherited_through_fork(tmp_path):
    with job(scenario("collate_deadlock", "--seconds", "120"), workers=2) as p:
        r = attach(p.pid, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "collate_deadlock", r.report["findings"]
    f = r.finding("collate_deadlock")
    ev = f["evidence"]
    assert "collate_with_stats" in ev["frame"] and ev["wait"] == "lock", ev
    # The fork explanation: the main process's thread that held the lock was there first.
    assert ev["start_method"] == "fork" and ev["main_threads_at_fork"] >= 2, ev
    assert "stats-writer" in ev["main_thread_names_at_fork"], ev
    assert "spawn" in f["fix"]
    # The stuck worker's stack, as py-spy read it, in the report.
    frames = [fr for t in r.stacks_of(int(ev["pid"])) for fr in t["frames"]]
    assert any(fr["function"] == "collate_with_stats" for fr in frames), frames
    # A stuck loader is not a slow one: no throughput finding claims it.
    assert not {"io_bound", "slow_getitem", "slow_collate"} & set(r.ids()), r.ids()
    no_traceback(r)


@pytest.mark.alone  # its spawned workers must start within the wait
def test_collate_deadlock_healthy_twin_is_quiet(tmp_path):
    with job(scenario("collate_deadlock", "--healthy", "--seconds", "120"), workers=2) as p:
        r = attach(p.pid, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "healthy" and r.loud() == [], r.report["findings"]
    assert "hang" not in r.report


def test_worker_hang_blocked_on_a_pipe(tmp_path):
    with job(scenario("worker_hang", "--on", "pipe", "--seconds", "120")) as p:
        worker = workers_under(p.pid)[0]
        r = attach(worker, tmp_path)  # the worker's pid: its main process is found from it
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "worker_hang", r.report["findings"]
    ev = r.finding("worker_hang")["evidence"]
    assert ev["stage"] == "getitem" and "__getitem__" in ev["frame"], ev
    assert ev["pid"] == worker and ev["syscall"] == "read", ev
    frames = [fr for t in r.stacks_of(worker) for fr in t["frames"]]
    assert any(fr["function"] == "__getitem__" and "os.read" in (fr["code"] or "") for fr in frames)
    no_traceback(r)


def test_worker_hang_healthy_twin_is_quiet(tmp_path):
    with job(scenario("worker_hang", "--on", "pipe", "--healthy", "--seconds", "120")) as p:
        r = attach(p.pid, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "worker_hang" not in r.ids() and r.loud() == [], r.report["findings"]
    assert "hang" not in r.report


# -- throughput while it runs ----------------------------------------------------------------


@pytest.mark.alone  # named from the workers' CPU time
def test_slow_getitem_with_the_hot_frame(tmp_path):
    with job(scenario("slow_getitem", "--seconds", "120")) as p:
        r = attach(p.pid, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "slow_getitem", r.report["findings"]
    f = r.finding("slow_getitem")
    ev = f["evidence"]
    assert ev["data_stall_fraction"] > 0.5 and ev["stack_idle_share"] < 0.2, ev
    assert "decode_and_resize" in f["fix"] + ev["hot_functions"], f
    # What only the hooks measure is said to be unknown, never guessed.
    assert ev["getitem_p50_ms"] == "unknown" and ev["worker_capacity_batches_per_s"] == "unknown"
    loader = r.report["loaders"][0]
    assert loader["batches_per_s"] is None and loader["batch_size"] is None, loader
    assert any("unknown" in n for n in r.report["notes"]), r.report["notes"]
    # The report on stdout (`> out.txt` keeps it), the notices on stderr.
    assert "dldoctor verdict: slow_getitem" in r.stdout, r.stdout
    assert "dldoctor verdict" not in r.stderr and "attached to pid" in r.stderr, r.stderr


@pytest.mark.alone  # its silence is read from CPU time
def test_slow_getitem_healthy_twin_is_quiet(tmp_path):
    with job(scenario("slow_getitem", "--healthy", "--seconds", "120")) as p:
        r = attach(p.pid, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "healthy" and r.loud() == [], r.report["findings"]


def test_io_bound_slow_socket(tmp_path):
    with job(scenario("io_bound", "--seconds", "120")) as p:
        r = attach(p.pid, tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "io_bound", r.report["findings"]
    ev = r.finding("io_bound")["evidence"]
    assert ev["worker_on_cpu_fraction"] < 0.5 and ev["stack_reading_share"] > 0.5, ev
    assert "__getitem__" in ev["hot_functions"], ev


def test_io_bound_healthy_twin_is_quiet(tmp_path):
    with job(scenario("io_bound", "--healthy", "--seconds", "120")) as p:
        r = attach(p.pid, tmp_path)
    assert r.returncode == 0, r.stderr
    assert "io_bound" not in r.ids() and r.loud() == [], r.report["findings"]


def test_cow_memory_growth_over_time(tmp_path):
    # No hooks count the samples read: the growth is read over time, a worker's Private_Dirty
    # rising while its RSS stays (the pages it shared with the main process turned private).
    with job(scenario("cow_memory_growth", "--seconds", "120"), workers=2, settle_s=0.5) as p:
        r = attach(p.pid, tmp_path, seconds="10")
    assert r.returncode == 0, r.stderr
    f = r.finding("cow_memory_growth")
    ev = f["evidence"]
    assert ev["private_dirty_mib_per_s"] >= 1 and ev["workers_growing"] >= 1, ev
    assert "unknown" in ev["samples_read"] and ev["projected_growth_next_10_min_mib"] > 0, ev
    assert "a second" in f["title"] and "numpy" in f["fix"], f
    no_traceback(r)


def test_cow_memory_growth_healthy_twin_is_quiet(tmp_path):
    # The same paths in one numpy array: reading them writes to no shared page.
    with job(scenario("cow_memory_growth", "--healthy", "--seconds", "120"), workers=2) as p:
        r = attach(p.pid, tmp_path, seconds="10")
    assert r.returncode == 0, r.stderr
    assert "cow_memory_growth" not in r.ids(), r.report["findings"]


# -- the job found from a torchrun agent -----------------------------------------------------


@pytest.mark.alone  # ranks: many processes at once
def test_ranks_found_from_the_torchrun_agent(tmp_path):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2"]
    cmd += [os.path.join(SCENARIOS, "_ranks.py"), "--seconds", "120"]
    with job(cmd, workers=2) as agent:
        r = attach(agent.pid, tmp_path)
    assert r.returncode == 0, r.stderr
    roles = {p["pid"]: p for p in r.report["attach"]["processes"]}
    assert roles[agent.pid]["role"] == "agent", roles
    mains = [p for p in roles.values() if p["role"] == "main"]
    assert sorted(m["rank"] for m in mains) == [0, 1], mains
    assert all(m["world_size"] == 2 for m in mains), mains
    assert sorted(ld["rank"] for ld in r.report["loaders"]) == [0, 1], r.report["loaders"]
    assert sum(1 for p in roles.values() if p["role"] == "worker") == 2, roles
    assert "rank 0, 1" in r.stderr, r.stderr


# -- what attach cannot diagnose: one line, an exit code -------------------------------------


def test_no_such_process(tmp_path):
    r = attach(2**22 + 12345, tmp_path)
    assert r.returncode == 3 and "no process with pid" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_not_a_python_process(tmp_path):
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        r = attach(sleeper.pid, tmp_path)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert r.returncode == 4 and "is not a Python process" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.report is None


def test_python_without_a_dataloader(tmp_path):
    idle = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(0.05)"])
    try:
        time.sleep(0.5)
        r = attach(idle.pid, tmp_path, seconds="2")
    finally:
        idle.kill()
        idle.wait()
    assert r.returncode == 5 and "runs no DataLoader" in r.stderr, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("dldoctor: error: "), r.stderr
    no_traceback(r)


@pytest.mark.parametrize("args", [["--seconds", "0"], ["--seconds", "-1"]])
def test_bad_arguments(tmp_path, args):
    r = subprocess.run(
        [sys.executable, "-m", "dldoctor", "attach", str(os.getpid()), *args],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "--seconds" in r.stderr and "Traceback" not in r.stderr


def test_help_names_the_exit_codes():
    r = subprocess.run(
        [sys.executable, "-m", "dldoctor", "attach", "--help"], capture_output=True, text=True
    )
    assert r.returncode == 0
    for code in ("3 no such process", "4 not a Python process", "5 a Python process"):
        assert code in " ".join(r.stdout.split()), r.stdout


# -- without the right to read the stacks ----------------------------------------------------


def unprivileged() -> list[str]:
    """A prefix whose command the kernel refuses to let read another user's memory: its real
    uid is nobody (the uid ptrace's access check compares) and CAP_SYS_PTRACE is out of its
    bounding set, while its effective uid stays root so that it can still read this
    checkout's Python environment (under /root)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to attach as another user than the job's")
    setpriv = shutil.which("setpriv")
    if not setpriv:
        pytest.skip("setpriv is not installed")
    return [setpriv, "--ruid=nobody", "--bounding-set=-sys_ptrace", "--"]


@pytest.mark.alone  # slow_getitem, named from the workers' CPU time
def test_permission_refused_says_the_fix_and_keeps_the_proc_findings(tmp_path):
    prefix = unprivileged()
    with job(scenario("slow_getitem", "--seconds", "120")) as p:
        r = attach(p.pid, tmp_path, prefix=prefix, seconds="3")
    assert r.returncode == 0, r.stderr
    said = r.stderr.splitlines()
    refusal = [ln for ln in said if ln.startswith("dldoctor:") and "permission denied" in ln]
    assert len(refusal) == 1 and "SYS_PTRACE" in refusal[0], r.stderr
    # Nothing could be judged without the stacks: not "healthy".
    assert r.report["verdict"] == "unknown", r.report["findings"]
    no_traceback(r)
    # What /proc shows still: the worker found, its CPU read.
    assert r.report["attach"]["stacks_readable"] is False
    loader = r.report["loaders"][0]
    assert loader["num_workers"] == 1 and loader["worker_cpu_pct"] is not None, loader
    assert any("permission denied" in n for n in r.report["notes"]), r.report["notes"]
