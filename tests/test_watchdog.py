"""The hang doctor against real processes: children that block on a lock inherited locked
through fork, on an Event, in a C mutex, or spin; stacks fetched through the hooks' own
stack-dump handlers (dldoctor.job.stackdump); CPU progress from /proc; a process that dies
while being captured; a busy worker asked for its stacks again and again; and a real
DataLoader deadlocked in collate_fn, caught by the Watchdog thread within its timeout."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from dldoctor import _ext

SIG = _ext.hang_stack_signal()

# The hooks' registration (dldoctor.job.stackdump): the safe-point handler on `sig`, the
# native one (faulthandler, the main thread only) beside it.
REGISTER = textwrap.dedent(
    """
    import os, sys
    from dldoctor.job.stackdump import StackDump
    def register(run_dir, sig):
        d = StackDump(os.path.join(run_dir, f"stack-{os.getpid()}.txt"))
        d.register()
        return d
    """
)

# A parent whose background thread holds a lock while it forks: the child inherits the lock
# locked and blocks forever taking it inside a collate-like function.
FORK_DEADLOCK = REGISTER + textwrap.dedent(
    """
    import threading, time
    run_dir, sig = sys.argv[1], int(sys.argv[2])
    lock = threading.Lock()
    held = threading.Event()
    def holder():
        with lock:
            held.set()
            time.sleep(3600)
    threading.Thread(target=holder, name="holder", daemon=True).start()
    held.wait()

    def take_lock():
        lock.acquire()

    def my_collate(batch):
        take_lock()
        return batch

    pid = os.fork()
    if pid == 0:
        keep = register(run_dir, sig)
        print(os.getpid(), flush=True)
        my_collate([1, 2])
        os._exit(0)
    os.waitpid(pid, 0)
    """
)

EVENT_WAIT = REGISTER + textwrap.dedent(
    """
    import threading
    keep = register(sys.argv[1], int(sys.argv[2]))
    class Dataset:
        def __getitem__(self, i):
            threading.Event().wait()
    print(os.getpid(), flush=True)
    Dataset()[0]
    """
)

# Stuck in C, never at a safe point: a default pthread mutex locked twice by its own thread
# (ctypes releases the GIL around the call; a signal does not end the wait).
NATIVE_MUTEX = REGISTER + textwrap.dedent(
    """
    import ctypes
    keep = register(sys.argv[1], int(sys.argv[2]))
    libc = ctypes.CDLL(None)
    mutex = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER on glibc
    def decode_native(m):
        libc.pthread_mutex_lock(m)
        libc.pthread_mutex_lock(m)
    class Dataset:
        def __getitem__(self, i):
            decode_native(mutex)
    print(os.getpid(), flush=True)
    Dataset()[0]
    """
)

BUSY = REGISTER + textwrap.dedent(
    """
    keep = register(sys.argv[1], int(sys.argv[2]))
    print(os.getpid(), flush=True)
    x = 0
    while True:
        x += 1
    """
)

# Registered with chain=True over SIG_DFL: the dump is written, then the default action ends
# the process, in the middle of the capture.
DIES_ON_SIGNAL = textwrap.dedent(
    """
    import faulthandler, os, sys, time
    f = open(os.path.join(sys.argv[1], f"stack-{os.getpid()}.txt"), "a")
    faulthandler.register(int(sys.argv[2]), file=f, all_threads=True, chain=True)
    print(os.getpid(), flush=True)
    time.sleep(3600)
    """
)


def _script(run_dir, code: str):
    # A file, not `-c`: the hang doctor reads the source line a frame stopped at.
    n = len(list(run_dir.glob("job_*.py")))
    path = run_dir / f"job_{n}.py"
    path.write_text(code)
    return path


class Child:
    """A child Python process running `code`; its first stdout line is the pid to watch."""

    def __init__(self, code: str, run_dir, *args: str) -> None:
        script = _script(run_dir, code)
        self.proc = subprocess.Popen(
            [sys.executable, str(script), str(run_dir), str(SIG), *args],
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        line = self.proc.stdout.readline()
        assert line.strip(), "child did not start"
        self.pid = int(line.split()[0])

    def close(self) -> None:
        # The session holds the child and anything it forked; end exactly that group.
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)
        self.proc.stdout.close()


@pytest.fixture
def children():
    started: list[Child] = []
    yield lambda code, run_dir, *a: started.append(Child(code, run_dir, *a)) or started[-1]
    for c in started:
        c.close()


def wait_blocked(pid: int, timeout_s: float = 5.0) -> dict:
    """Waits until the process sleeps (S) with no CPU change over 100 ms."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        a = _ext.probe_process(pid, threads=False)
        time.sleep(0.1)
        b = _ext.probe_process(pid, threads=False)
        if b["state"] == "S" and a["cpu_ns"] == b["cpu_ns"]:
            return b
    raise AssertionError(f"pid {pid} never blocked: {b}")


def frames(text: str) -> list[dict]:
    return [f for t in _ext.parse_faulthandler(text) for f in t["frames"]]


def test_stack_signals_are_the_hooks_signals():
    from dldoctor.job import stackdump

    assert SIG == stackdump.STACK_SIGNAL
    assert _ext.native_stack_signal(SIG) == stackdump.STACK_SIGNAL_NATIVE


def test_lock_inherited_locked_through_fork(tmp_path, children):
    child = children(FORK_DEADLOCK, tmp_path)
    probe = wait_blocked(child.pid)
    if probe["syscall"] is not None:  # needs ptrace rights over the child
        assert probe["syscall"] == "futex"

    text = _ext.capture_stacks([child.pid], str(tmp_path))[child.pid]
    fr = frames(text)
    assert fr, f"no stack captured: {text!r}"
    # The top frame is the line that calls acquire, inside the collate-like function.
    assert fr[0]["function"] == "take_lock"
    assert fr[1]["function"] == "my_collate"
    parsed = _ext.parse_faulthandler(text)
    snapshot = {
        "stalled_s": 5.0,
        "processes": [
            {
                "pid": child.pid,
                "loader": 0,
                "worker": 0,
                "state": probe["state"],
                "syscall": probe["syscall"],
                "wchan": probe["wchan"],
                "raw_stack": text,
                "cpu_ns_since_stall": 0,
                "cpu_window_s": 5.0,
            }
        ],
    }
    # The source line is read back through classify_hang's annotation of raw_stack.
    findings = _ext.classify_hang(
        snapshot, {"loaders": [{"loader": 0, "collate_fn": "my_collate"}]}
    )
    assert findings and findings[0]["evidence"]["wait"] == "lock"
    assert findings[0]["evidence"]["top_code"] == "lock.acquire()"
    assert parsed[-1]["current"] and parsed[-1]["thread_id"].startswith("0x")


def test_event_wait_in_getitem(tmp_path, children):
    child = children(EVENT_WAIT, tmp_path)
    wait_blocked(child.pid)
    text = _ext.capture_stacks([child.pid], str(tmp_path), SIG, 500)[child.pid]
    fr = frames(text)
    names = [f["function"] for f in fr]
    # Event.wait -> Condition.wait in threading.py, called from the dataset's __getitem__.
    assert names[:3] == ["wait", "wait", "__getitem__"], names
    assert fr[0]["file"].endswith("threading.py")


def test_main_thread_stuck_in_c_gets_the_native_dump(tmp_path, children):
    child = children(NATIVE_MUTEX, tmp_path)
    wait_blocked(child.pid)
    detail = _ext.capture_stacks_detail([child.pid], str(tmp_path), SIG, 1000)[child.pid]
    # No safe point within kSafePointWaitMs: faulthandler's one-thread dump instead.
    assert detail["native"] is True, detail
    assert detail["text"].startswith("Stack (most recent call first):"), detail
    names = [f["function"] for f in frames(detail["text"])]
    assert names[:2] == ["decode_native", "__getitem__"], names
    assert _ext.probe_process(child.pid)["state"] == "S"  # still stuck, not ended


def test_stacks_of_a_busy_process_come_at_a_safe_point(tmp_path, children):
    child = children(BUSY, tmp_path)
    for _ in range(20):
        detail = _ext.capture_stacks_detail([child.pid], str(tmp_path), SIG, 1000)[child.pid]
        assert detail["native"] is False and detail["note"] is None, detail
        assert detail["text"].startswith("Current thread 0x"), detail
        assert [f["function"] for f in frames(detail["text"])] == ["<module>"]
    assert child.proc.poll() is None


def test_cpu_progress_busy_versus_blocked(tmp_path, children):
    busy = children(BUSY, tmp_path)
    blocked = children(EVENT_WAIT, tmp_path)
    wait_blocked(blocked.pid)
    a = {p: _ext.probe_process(p)["cpu_ns"] for p in (busy.pid, blocked.pid)}
    time.sleep(0.5)
    b = {p: _ext.probe_process(p)["cpu_ns"] for p in (busy.pid, blocked.pid)}
    assert b[blocked.pid] == a[blocked.pid]
    # Far from 0 even when other jobs crowd the 2 cores (~100% vs ~0%, coarse on purpose).
    assert b[busy.pid] - a[busy.pid] > 0.05e9

    # The same through the Watchdog: CPU since the stall began, per process.
    got = threading.Event()
    seen = {}
    t0 = time.monotonic_ns()
    state = {
        "loader_active": True,
        "last_batch_ns": t0,
        "processes": [
            {"pid": busy.pid, "loader": 0, "worker": 0},
            {"pid": blocked.pid, "loader": 0, "worker": 1},
        ],
    }

    def on_hang(snapshot, findings):
        seen.update(snapshot=snapshot, findings=findings)
        got.set()

    dog = _ext.Watchdog(lambda: state, on_hang, run_dir=str(tmp_path), timeout_s=0.6, poll_s=0.05)
    dog.start()
    try:
        assert got.wait(0.6 + 2.0 + 1.0)
    finally:
        dog.stop()
    share = {
        p["pid"]: p["cpu_ns_since_stall"] / 1_000_000_000 / p["cpu_window_s"]
        for p in seen["snapshot"]["processes"]
    }
    assert share[blocked.pid] < 0.05
    # Busy reads ~1 on a quiet machine; a host that stalls its VM gave it 0.149 once. What the
    # watchdog must tell apart is some progress from none.
    assert share[busy.pid] > max(0.05, 10 * share[blocked.pid])
    ids = [f["id"] for f in seen["findings"]]
    assert "collate_deadlock" not in ids


def test_pid_exits_during_capture(tmp_path, children):
    child = children(DIES_ON_SIGNAL, tmp_path)
    wait_blocked(child.pid)
    detail = _ext.capture_stacks_detail([child.pid], str(tmp_path), SIG, 500)[child.pid]
    assert detail["gone"] is True
    assert detail["note"] == "gone"
    # Whatever it managed to write is still parsed, without error.
    _ext.parse_faulthandler(detail["text"])
    child.proc.wait(timeout=5)
    after = _ext.probe_process(child.pid)
    assert after["gone"] is True and after["state"] == "gone"
    assert after["cpu_ns"] is None


def test_vanished_and_unhandled_pids_are_safe(tmp_path):
    # A pid that no longer exists.
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    detail = _ext.capture_stacks_detail([p.pid], str(tmp_path), SIG, 200)[p.pid]
    assert detail["gone"] is True and detail["text"] == ""
    # A process without a handler for the signal is not sent it (it would end it).
    sleeper = subprocess.Popen(["sleep", "30"])
    try:
        wait_blocked(sleeper.pid)  # past exec: no handler inherited from this process
        detail = _ext.capture_stacks_detail([sleeper.pid], str(tmp_path), SIG, 200)[sleeper.pid]
        assert "no handler" in detail["note"]
        assert sleeper.poll() is None, "the capture must not kill a process without a handler"
    finally:
        sleeper.kill()
        sleeper.wait()


def test_bad_shapes_are_one_line_errors():
    with pytest.raises(_ext.CoreError, match="'pid' must be an int"):
        _ext.classify_hang({"processes": [{"pid": "x"}]})
    with pytest.raises(_ext.CoreError, match="must be a dict"):
        _ext.classify_hang([1, 2])
    with pytest.raises(_ext.CoreError, match="probe must be callable"):
        _ext.Watchdog(42)


# -- a real DataLoader ----------------------------------------------------------------------

DATALOADER_DEADLOCK = REGISTER + textwrap.dedent(
    """
    import json, threading, time
    import torch
    from torch.utils.data import DataLoader, Dataset
    run_dir, sig, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    keep = register(run_dir, sig)
    lock = threading.Lock()
    held = threading.Event()

    def holder():
        with lock:
            held.set()
            time.sleep(2.0)  # long enough to cover the fork of the workers

    class Numbers(Dataset):
        def __len__(self):
            return 64
        def __getitem__(self, i):
            time.sleep(0.002)
            return torch.tensor([i])

    def my_collate(batch):
        with lock:
            return torch.stack(batch)

    class Init:
        def __call__(self, worker_id):
            global keep
            keep = register(run_dir, sig)

    if mode == "deadlock":
        threading.Thread(target=holder, name="holder", daemon=True).start()
        held.wait()
    dl = DataLoader(Numbers(), batch_size=4, num_workers=2, collate_fn=my_collate,
                    worker_init_fn=Init(), multiprocessing_context="fork")
    threads = [t.name for t in threading.enumerate()]
    t_iter = time.monotonic_ns()
    it = iter(dl)
    print(json.dumps({"main": os.getpid(), "workers": [w.pid for w in it._workers],
                      "threads": threads, "t_iter": t_iter}), flush=True)
    with open(os.path.join(run_dir, "batches"), "a") as out:
        for b in it:
            out.write(f"{time.monotonic_ns()}\\n")
            out.flush()
        out.write("end\\n")  # the iterator is exhausted: no batch is due any more
    """
)


def _loader_job(tmp_path, mode):
    pytest.importorskip("torch")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(_script(tmp_path, DATALOADER_DEADLOCK)),
            str(tmp_path),
            str(SIG),
            mode,
        ],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    info = json.loads(proc.stdout.readline())
    return proc, info


def _probe_for(tmp_path, proc, info):
    batches = tmp_path / "batches"

    def probe():
        lines = batches.read_text().split() if batches.exists() else []
        if proc.poll() is not None or lines[-1:] == ["end"]:
            return {"loader_active": False}
        last = int(lines[-1]) if lines else None
        procs = [{"pid": info["main"], "loader": -1, "worker": -1}]
        procs += [{"pid": p, "loader": 0, "worker": w} for w, p in enumerate(info["workers"])]
        return {
            "loader_active": True,
            "waiting": True,
            "last_batch_ns": last,
            "active_since_ns": info["t_iter"],
            "processes": procs,
            "context": {
                "loaders": [
                    {
                        "loader": 0,
                        "num_workers": 2,
                        "collate_fn": "__main__.my_collate",
                        "start_method": "fork",
                        "main_threads_at_fork": len(info["threads"]),
                        "main_thread_names_at_fork": info["threads"],
                        "waiting_batch": 0,
                        "waiting_worker": 0,
                        "outstanding": {0: [0, 2], 1: [1, 3]},
                    }
                ]
            },
        }

    return probe


def _end(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=10)
    proc.stdout.close()


@pytest.mark.scenario
def test_real_dataloader_collate_deadlock_is_named(tmp_path):
    proc, info = _loader_job(tmp_path, "deadlock")
    got = threading.Event()
    seen = {}

    def on_hang(snapshot, findings):
        seen.update(snapshot=snapshot, findings=findings, at=time.monotonic_ns())
        got.set()

    timeout = 1.0
    dog = _ext.Watchdog(
        _probe_for(tmp_path, proc, info),
        on_hang,
        run_dir=str(tmp_path),
        timeout_s=timeout,
        poll_s=0.1,
    )
    dog.start()
    try:
        assert got.wait(timeout + 2.0 + 5.0), "no hang reported"
    finally:
        dog.stop()
        _end(proc)
    assert (tmp_path / "batches").read_text() == "", "the loader was expected to deadlock"
    findings = seen["findings"]
    assert findings[0]["id"] == "collate_deadlock", findings
    ev = findings[0]["evidence"]
    assert ev["frame"].endswith("in my_collate")
    assert ev["wait"] == "lock"
    assert ev["main_threads_at_fork"] == 2
    assert "holder" in ev["main_thread_names_at_fork"]
    assert "multiprocessing_context='spawn'" in findings[0]["fix"]
    assert [f for f in findings if f["severity"] == "critical"][0] is findings[0]
    # Reported within the timeout + 2 s of the stall, which began when the iterator did.
    assert (seen["at"] - info["t_iter"]) / 1e9 < timeout + 2.0
    # Both workers inherited the locked lock; the finding leads with the one holding the
    # batch the main process waits for, and lists both.
    assert ev["worker"] == 0
    assert ev["stuck_workers"] == ", ".join(f"{w} (pid {p})" for w, p in enumerate(info["workers"]))


@pytest.mark.scenario
def test_real_dataloader_healthy_twin_is_not_flagged(tmp_path):
    proc, info = _loader_job(tmp_path, "healthy")
    hangs = []
    dog = _ext.Watchdog(
        _probe_for(tmp_path, proc, info),
        lambda s, f: hangs.append(f),
        run_dir=str(tmp_path),
        timeout_s=1.0,
        poll_s=0.1,
    )
    dog.start()
    try:
        proc.wait(timeout=30)
    finally:
        dog.stop()
        _end(proc)
    assert len((tmp_path / "batches").read_text().split()) == 16 + 1  # + "end"
    assert hangs == []


# A busy loader whose worker is asked for its stacks again and again, as a slow job may be
# (each stall the watchdog sees, each attach). faulthandler's all-threads dump, which the hooks
# used before, crashed such a worker within a few signals (it walked the queue-feeder thread's
# frames while that thread pickled a batch; CPython gh-116008). Signals go to the process as
# a whole (any thread may take them) and through the capture (to the main thread).
SIGNALLED_LOADER = REGISTER + textwrap.dedent(
    """
    import json, random, threading, time
    import torch
    from torch.utils.data import DataLoader, Dataset
    from dldoctor import _ext
    run_dir, sig = sys.argv[1], int(sys.argv[2])

    class Squares(Dataset):
        def __len__(self):
            return 1 << 30
        def __getitem__(self, i):
            return sum(j * j for j in range(i % 50))

    class Init:
        def __call__(self, worker_id):
            global keep
            keep = register(run_dir, sig)

    dl = DataLoader(Squares(), batch_size=8, num_workers=1, persistent_workers=True,
                    worker_init_fn=Init(), multiprocessing_context="fork")
    it = iter(dl)
    first = next(it)
    wpid = it._workers[0].pid
    done = {"captures": [], "error": None}

    def shoot():
        for k in range(300):
            os.kill(wpid, sig)
            time.sleep(random.uniform(0, 0.002))
        for k in range(20):
            d = _ext.capture_stacks_detail([wpid], run_dir, sig, 1000)[wpid]
            done["captures"].append([d["native"], "_worker_loop" in d["text"]])

    t = threading.Thread(target=shoot)
    t.start()
    n = 1
    try:
        while t.is_alive():
            b = next(it)
            assert b.tolist() == [sum(j * j for j in range((8 * n + k) % 50)) for k in range(8)]
            n += 1
    except Exception as e:
        done["error"] = f"{type(e).__name__}: {e}"
    t.join()
    done["batches"] = n
    print(json.dumps(done), flush=True)
    """
)


@pytest.mark.scenario
def test_stack_dumps_never_crash_a_busy_worker(tmp_path):
    pytest.importorskip("torch")
    out = subprocess.run(
        [sys.executable, str(_script(tmp_path, SIGNALLED_LOADER)), str(tmp_path), str(SIG)],
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    done = json.loads(out.stdout.splitlines()[-1])
    assert done["error"] is None, done["error"]
    assert done["batches"] > 20
    # Every capture came at a safe point, with the worker loop in it.
    assert done["captures"] == [[False, True]] * 20
