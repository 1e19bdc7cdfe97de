"""`dldoctor run --live` in a real pseudo-terminal (tmux): frames refresh with changing
figures, the job's own output still shows, Ctrl-C ends the job, the report is written and
the terminal is left as it was (modes, cursor, no panel left behind)."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from doctor_run import scenario

pytestmark = [
    pytest.mark.scenario,
    pytest.mark.skipif(shutil.which("tmux") is None, reason="no tmux (tools/install installs it)"),
]
FRAME = re.compile(r"dldoctor live\s+([\d.]+) s")
LOADER_ROW = re.compile(r"^\s*1\s+1\s+(\d+)\s+([\d.]+|-)\s", re.M)


class Tmux:
    def __init__(self, tmp_path, cols=120, rows=40):
        self.sock = f"dldoctor-test-{os.getpid()}"
        self.name = "live"
        self.tmp = tmp_path
        self._tmux(
            "new-session",
            "-d",
            "-s",
            self.name,
            "-x",
            str(cols),
            "-y",
            str(rows),
            "env",
            "PS1=$ ",
            "TERM=xterm-256color",
            "bash",
            "--norc",
            "--noprofile",
        )

    def _tmux(self, *args) -> str:
        return subprocess.run(
            ["tmux", "-L", self.sock, *args], capture_output=True, text=True, check=True
        ).stdout

    def type(self, line: str) -> None:
        self._tmux("send-keys", "-t", self.name, "-l", line)
        self._tmux("send-keys", "-t", self.name, "Enter")

    def keys(self, *keys: str) -> None:
        self._tmux("send-keys", "-t", self.name, *keys)

    def screen(self) -> str:
        return self._tmux("capture-pane", "-p", "-t", self.name)

    def history(self) -> str:
        return self._tmux("capture-pane", "-p", "-S", "-200", "-t", self.name)

    def cursor_visible(self) -> bool:
        return self._tmux("display", "-p", "-t", self.name, "#{cursor_flag}").strip() == "1"

    def wait_file(self, path: str, timeout: float) -> bool:
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if os.path.exists(path) and os.path.getsize(path) > 0:
                return True
            time.sleep(0.1)
        return False

    def close(self) -> None:
        subprocess.run(["tmux", "-L", self.sock, "kill-server"], capture_output=True)


@pytest.fixture
def tmux(tmp_path):
    t = Tmux(tmp_path)
    try:
        yield t
    finally:
        t.close()


def test_live_view_refreshes_and_ctrl_c_leaves_a_clean_terminal(tmux, tmp_path):
    report = str(tmp_path / "report.json")
    modes_before = str(tmp_path / "stty-before")
    modes_after = str(tmp_path / "stty-after")
    done = str(tmp_path / "done")
    tmux.type(f"stty -g > {modes_before}")
    job = scenario("slow_getitem", "--seconds", "120")
    cmd = [sys.executable, "-m", "dldoctor", "run", "--live", "--json", report, "--", *job]
    tmux.type(
        f"cd {shlex.quote(str(tmp_path))}; {shlex.join(cmd)}; echo exit=$? > {done};"
        f" stty -g > {modes_after}"
    )

    # Frames: the clock and the loader's figures move between refreshes.
    frames = []
    end = time.monotonic() + 60
    while time.monotonic() < end and len(frames) < 6:
        screen = tmux.screen()
        m, row = FRAME.search(screen), LOADER_ROW.search(screen)
        if m and row and row.group(2) != "-":
            if not frames or frames[-1][0] != m.group(1):
                frames.append((m.group(1), int(row.group(1)), screen))
        time.sleep(0.3)
    assert len(frames) >= 6, f"too few live frames; screen:\n{tmux.screen()}"
    clocks = [float(f[0]) for f in frames]
    assert clocks == sorted(clocks) and clocks[-1] - clocks[0] >= 1.0
    assert frames[-1][1] > frames[0][1], "the batch count did not move"
    gaps = [b - a for a, b in zip(clocks, clocks[1:])]
    assert min(gaps) >= 0.3 and sorted(gaps)[len(gaps) // 2] <= 1.2  # about twice a second
    last = frames[-1][2]
    assert "loader 1 worker 0" in last and "/dev/shm" in last and "verdict so far" in last

    tmux.keys("C-c")
    assert tmux.wait_file(done, 60), f"dldoctor did not end after Ctrl-C:\n{tmux.screen()}"
    assert tmux.wait_file(modes_after, 10)
    with open(done) as f:
        assert f.read().strip() == "exit=130"  # the job's own end: killed by SIGINT
    with open(modes_before) as a, open(modes_after) as b:
        assert a.read() == b.read(), "terminal modes changed"
    assert tmux.cursor_visible()
    screen = tmux.screen()
    assert "dldoctor live" not in screen  # the panel was erased, not left half-drawn
    hist = tmux.history()
    assert "KeyboardInterrupt" in hist  # the job's own output reached the terminal
    assert "dldoctor verdict: slow_getitem" in hist

    import json

    with open(report) as f:
        data = json.load(f)
    assert data["verdict"] == "slow_getitem"
    assert data["exit_code"] == 130


def test_live_without_a_terminal_goes_on_without_it(tmp_path):
    report = str(tmp_path / "r.json")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "dldoctor",
            "run",
            "--live",
            "--json",
            report,
            "--",
            *scenario("slow_getitem", "--healthy", "--seconds", "2"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert p.returncode == 0, p.stderr
    assert "--live needs a terminal" in p.stderr
    assert "batches:" in p.stdout  # the job's output is untouched
    assert os.path.exists(report)


def test_live_panel_and_hang_report_share_the_terminal(tmux, tmp_path):
    """The hang doctor's report prints above the panel (no stale frame left in the
    scrollback), the panel goes on and says HANG, and Ctrl-C still ends it all cleanly."""
    report = str(tmp_path / "hang.json")
    done = str(tmp_path / "done")
    job = scenario("worker_hang", "--seconds", "120")
    cmd = [
        sys.executable,
        "-m",
        "dldoctor",
        "run",
        "--live",
        "--hang-timeout",
        "3",
        "--json",
        report,
        "--",
        *job,
    ]
    tmux.type(f"{shlex.join(cmd)}; echo exit=$? > {done}")
    end = time.monotonic() + 60
    while time.monotonic() < end and "still waiting" not in tmux.history():
        time.sleep(0.3)
    time.sleep(1.5)  # a few more frames after the hang report
    hist = tmux.history()
    assert "still waiting" in hist, hist
    lines = hist.splitlines()
    verdicts = [ln for ln in lines if "dldoctor verdict: worker_hang" in ln]
    assert verdicts and all(ln.startswith("dldoctor verdict") for ln in verdicts), verdicts
    assert sum("dldoctor live" in ln for ln in lines) == 1, hist  # one panel, at the bottom
    assert "HANG" in tmux.screen()
    tmux.keys("C-c")
    assert tmux.wait_file(done, 60), tmux.screen()
    with open(done) as f:
        assert f.read().strip() == "exit=130"
    assert tmux.cursor_visible()
    assert "dldoctor live" not in tmux.screen()
