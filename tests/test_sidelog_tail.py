"""The watcher's side-log tail: records of live and exited processes, each once, and the files
of exited processes left alone until their size changes."""

import json
import os
import subprocess
import sys

from dldoctor.watcher import sidelog_tail
from dldoctor.watcher.sidelog_tail import SideLogTail


def _exited_writer(run_dir, records) -> str:
    """A real process that appends `records` to its own side log and exits; its file name."""
    code = (
        "import json, os, sys\n"
        "path = os.path.join(sys.argv[1], f'side-{os.getpid()}.jsonl')\n"
        "with open(path, 'a') as f:\n"
        "    for r in json.loads(sys.argv[2]):\n"
        "        f.write(json.dumps(r) + '\\n')\n"
        "print(os.path.basename(path))\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code, str(run_dir), json.dumps(records)],
        capture_output=True,
        text=True,
        check=True,
    )
    return r.stdout.strip()


def _append(path, text):
    with open(path, "a") as f:
        f.write(text)


def test_a_live_process_line_in_progress_waits_for_its_end(tmp_path):
    tail = SideLogTail(str(tmp_path))
    mine = tmp_path / f"side-{os.getpid()}.jsonl"
    _append(mine, '{"type": "a"}\n{"type": ')
    assert [r["type"] for r in tail.poll()] == ["a"]
    _append(mine, '"b"}\n')
    assert [r["type"] for r in tail.poll()] == ["b"]
    assert tail.poll() == []


def test_an_exited_process_file_is_read_once_then_retired(tmp_path, monkeypatch):
    tail = SideLogTail(str(tmp_path))
    name = _exited_writer(tmp_path, [{"type": "worker_start"}, {"type": "profile"}])
    assert [r["type"] for r in tail.poll()] == ["worker_start", "profile"]
    # Retired: opening it again would find nothing; a poll does not look at it at all.
    opened = []
    real_open = open
    monkeypatch.setattr(
        "builtins.open", lambda p, *a, **k: opened.append(p) or real_open(p, *a, **k)
    )
    tail._next_retired_ns = float("inf")  # the periodic look at retired files is not due
    assert tail.poll() == []
    assert not [p for p in opened if str(p).endswith(name)]


def test_a_reused_pid_records_come_at_the_next_look_and_at_the_end(tmp_path, monkeypatch):
    tail = SideLogTail(str(tmp_path))
    name = _exited_writer(tmp_path, [{"type": "process"}])
    assert len(tail.poll()) == 1
    # A new process that got the same pid appends to the same file.
    _append(tmp_path / name, '{"type": "iter_start"}\n')
    tail._next_retired_ns = float("inf")
    assert tail.poll() == []  # retired: not looked at between the periodic looks
    assert [r["type"] for r in tail.poll(everything=True)] == ["iter_start"]
    assert tail.poll(everything=True) == []
    _append(tmp_path / name, '{"type": "profile"}\n')
    monkeypatch.setattr(sidelog_tail, "RETIRED_EVERY_NS", 0)
    tail._next_retired_ns = 0
    assert [r["type"] for r in tail.poll()] == ["profile"]


def test_a_live_process_file_with_nothing_new_is_not_opened(tmp_path, monkeypatch):
    tail = SideLogTail(str(tmp_path))
    mine = tmp_path / f"side-{os.getpid()}.jsonl"
    _append(mine, '{"type": "a"}\n')
    assert [r["type"] for r in tail.poll()] == ["a"]
    opened = []
    real_open = open
    monkeypatch.setattr(
        "builtins.open", lambda p, *a, **k: opened.append(p) or real_open(p, *a, **k)
    )
    assert tail.poll() == [] and tail.poll() == []
    assert not opened  # its size said so
    _append(mine, '{"type": "b"}\n')
    assert [r["type"] for r in tail.poll()] == ["b"]


def test_a_new_process_file_is_found_when_the_folder_changes_or_at_the_next_listing(tmp_path):
    tail = SideLogTail(str(tmp_path))
    assert tail.poll() == []
    first = _exited_writer(tmp_path, [{"type": "process"}])
    assert [r["type"] for r in tail.poll()] == ["process"]  # the folder's time changed
    # A file made within the same tick of the folder's clock as the last listing leaves the
    # folder's time as it was: found at the next periodic listing, and at the last poll.
    tail._next_list_ns = float("inf")
    second = _exited_writer(tmp_path, [{"type": "worker_start"}])
    tail._dir_mtime = os.stat(tmp_path).st_mtime_ns
    assert tail.poll() == []
    tail._next_list_ns = 0
    assert [r["type"] for r in tail.poll()] == ["worker_start"]
    assert first != second and tail.poll(everything=True) == []
