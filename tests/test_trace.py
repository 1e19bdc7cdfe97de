"""The event ring from Python: the reader class the watcher uses and the per-process writer
the hooks use (pid taken at emit time, refreshed after fork)."""

from __future__ import annotations

import os

import pytest

from dldoctor import _ext
from dldoctor.job.events import K_WORKER_BATCH


@pytest.fixture()
def ring(tmp_path):
    r = _ext.EventRing.create(str(tmp_path / "events.ring"), 256)
    yield r
    _ext.trace_close()
    r.close()


def test_create_emit_drain_round_trip(ring):
    assert ring.capacity == 256
    assert ring.watcher_pid == os.getpid()
    assert ring.emit(
        K_WORKER_BATCH,
        loader=3,
        worker=1,
        index=7,
        count=64,
        t_ns=123,
        v0=10,
        v1=-1,
        v2=2**40,
        v3=4096,
        flags=1,
    )
    events = ring.drain()
    assert events == [(K_WORKER_BATCH, os.getpid(), 123, 1, 3, 1, 7, 64, 10, -1, 2**40, 4096, 0)]
    assert ring.drain() == []


def test_zero_time_means_now(ring):
    before = _ext.monotonic_ns()
    ring.emit(K_WORKER_BATCH)
    (ev,) = ring.drain()
    assert before <= ev[2] <= _ext.monotonic_ns()


def test_out_of_range_values_are_narrowed_not_raised(ring):
    # A hook must never raise because a value exceeded its field.
    assert ring.emit(K_WORKER_BATCH, loader=70000, worker=40000, index=2**40, count=-1)
    assert len(ring.drain()) == 1


def test_full_ring_counts_drops(ring):
    accepted = sum(ring.emit(K_WORKER_BATCH, index=i) for i in range(300))
    assert accepted == 256
    assert ring.dropped == 44
    events = ring.drain(max=10)
    assert [e[6] for e in events] == list(range(10))
    assert ring.pending == 246


def test_errors_are_one_line_core_errors(tmp_path):
    with pytest.raises(_ext.CoreError) as e:
        _ext.EventRing.open(str(tmp_path / "missing"))
    assert "\n" not in str(e.value) and "missing" in str(e.value)
    (tmp_path / "junk").write_bytes(b"x" * 10000)
    with pytest.raises(_ext.CoreError, match="not an event ring"):
        _ext.EventRing.open(str(tmp_path / "junk"))
    with pytest.raises(_ext.CoreError):
        _ext.trace_open(str(tmp_path / "junk"))
    assert not _ext.trace_active()


def test_closed_ring_raises_instead_of_crashing(ring):
    ring.close()
    assert ring.closed
    with pytest.raises(_ext.CoreError, match="closed"):
        ring.drain()


def test_process_writer_is_a_no_op_without_a_ring():
    _ext.trace_close()
    assert not _ext.trace_active()
    assert _ext.trace_emit(K_WORKER_BATCH, 1, 0, 0, 1, 0) is False
    assert _ext.trace_next_loader_id() == 0


def test_process_writer_and_loader_ids(ring):
    assert _ext.trace_open(ring.path)
    assert _ext.trace_open(ring.path)  # once per process: a second call is a no-op
    assert _ext.trace_active() and _ext.trace_path() == ring.path
    ids = {_ext.trace_next_loader_id() for _ in range(5)} | {ring.next_loader_id()}
    assert len(ids) == 6 and 0 not in ids
    assert _ext.trace_emit(K_WORKER_BATCH, 9, 2, 5, 4, 0, 1, 2, 3, 4, flags=1)
    (ev,) = ring.drain()
    assert ev[0] == K_WORKER_BATCH and ev[1] == os.getpid()
    assert ev[3:] == (1, 9, 2, 5, 4, 1, 2, 3, 4, 0)


def test_forked_child_writes_with_its_own_pid(ring):
    _ext.trace_open(ring.path)
    _ext.trace_emit(K_WORKER_BATCH, 1, -1, 0, 0, 0)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child inherits the mapping; the cached pid must be refreshed
        try:
            ok = _ext.trace_emit(K_WORKER_BATCH, 1, 0, 1, 0, 0) and _ext.trace_pid() == os.getpid()
            os.write(w, b"1" if ok else b"0")
        finally:
            os._exit(0)
    os.close(w)
    assert os.read(r, 1) == b"1"
    os.waitpid(pid, 0)
    events = ring.drain()
    assert [(e[1], e[6]) for e in events] == [(os.getpid(), 0), (pid, 1)]


def test_reader_skips_a_slot_whose_writer_never_published(tmp_path):
    # Reserve a slot the way a writer killed mid-write leaves it: bump head directly.
    import mmap
    import struct

    ring = _ext.EventRing.create(str(tmp_path / "r"), 16)
    ring.set_stall_timeout(0.05)
    with open(ring.path, "r+b") as f:
        m = mmap.mmap(f.fileno(), 4096)
        head_off = 64  # RingHeader.head: its own cache line, after the fixed fields
        (head,) = struct.unpack_from("<Q", m, head_off)
        struct.pack_into("<Q", m, head_off, head + 1)
        m.close()
    ring.emit(K_WORKER_BATCH, index=1)
    assert ring.drain() == []
    import time

    time.sleep(0.08)
    assert [e[6] for e in ring.drain()] == [1]
    assert ring.lost == 1
    ring.close()


def test_the_watchers_ring_is_in_memory_and_another_process_writes_by_its_path():
    """Not a file on the run directory's disk (its writeback would fault the job's event
    writes): a memfd, which the job's processes open through /proc/<watcher>/fd/<n>."""
    import subprocess
    import sys

    from dldoctor.watcher.watcher import Watcher

    with Watcher() as w:
        assert w.ring_path.startswith(f"/proc/{os.getpid()}/fd/"), w.ring_path
        assert not os.path.exists(os.path.join(w.run_dir, "events.ring"))
        code = (
            "import sys; from dldoctor import _ext; _ext.trace_open(sys.argv[1]); "
            f"assert _ext.trace_emit({K_WORKER_BATCH}, 2, 0, 5, 8, 0)"
        )
        subprocess.run([sys.executable, "-c", code, w.child_env()["DLDOCTOR_RING"]], check=True)
        reader = _ext.EventRing.open(w.ring_path)
        try:
            (event,) = reader.drain()
        finally:
            reader.close()
        assert event[0] == K_WORKER_BATCH and event[4:7] == (2, 0, 5)
