"""`dldoctor run` as a user meets it: exit codes, bad input, jobs without a DataLoader,
the early notice, and the Python API (watch, profile)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time

import pytest

from doctor_run import run_doctor, scenario


def write(tmp_path, name, body):
    p = tmp_path / name
    p.write_text(textwrap.dedent(body))
    return str(p)


def test_nonexistent_command_is_one_line_and_127(tmp_path):
    r = run_doctor(["no-such-command-dldoctor"], tmp_path)
    assert r.returncode == 127
    lines = [line for line in r.stderr.strip().splitlines() if line]
    assert lines == ["dldoctor: error: command not found: no-such-command-dldoctor"]
    assert "Traceback" not in r.stderr


def test_no_command_is_one_line(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "dldoctor", "run"], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("dldoctor: error: no command given")
    assert "Traceback" not in proc.stderr


def test_bad_hang_timeout_is_one_line(tmp_path):
    r = run_doctor([sys.executable, "-c", "pass"], tmp_path, ["--hang-timeout", "-1"])
    assert r.returncode == 2
    assert r.stderr.strip().startswith("dldoctor: error: --hang-timeout")
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize(
    "option, where, says",
    [
        ("--json", "missing/r.json", "does not exist"),
        ("--html", ".", "is a directory"),
        ("--trace", "ro/t.json", "is not writable"),
    ],
)
def test_bad_output_path_is_refused_before_the_job_runs(tmp_path, option, where, says):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    marker = tmp_path / "ran"
    try:
        if os.access(ro, os.W_OK) and where.startswith("ro/"):
            pytest.skip("root writes into a read-only folder")
        r = run_doctor(
            [sys.executable, "-c", f"open({str(marker)!r}, 'w')"],
            tmp_path,
            [option, str(tmp_path / where)],
        )
    finally:
        ro.chmod(0o700)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.strip().splitlines() if line]
    assert len(lines) == 1 and lines[0].startswith(f"dldoctor: error: {option} "), r.stderr
    assert says in lines[0]
    assert not marker.exists()  # the job never ran


def test_a_write_that_fails_at_the_end_falls_back_and_keeps_the_exit_code(tmp_path):
    out = tmp_path / "gone"
    out.mkdir()
    job = f"import shutil, sys; shutil.rmtree({str(out)!r}); sys.exit(3)"  # the folder goes away
    proc = subprocess.run(
        [sys.executable, "-m", "dldoctor", "run", "-q", "--json", str(out / "r.json"),
         "--", sys.executable, "-c", job],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr  # the job's, not dldoctor's 2
    line = next(x for x in proc.stderr.splitlines() if "could not write the JSON report" in x)
    tmp = line.rsplit("written to ", 1)[1]
    try:
        assert '"schema": 1' in open(tmp).read()
    finally:
        os.unlink(tmp)


def test_report_refuses_a_bad_output_path(tmp_path):
    src = tmp_path / "r.json"
    src.write_text('{"schema": 1, "verdict": "healthy", "findings": []}')
    proc = subprocess.run(
        [sys.executable, "-m", "dldoctor", "report", str(src), "--json", str(tmp_path / "no/x")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip().startswith("dldoctor: error: --json"), proc.stderr
    assert "does not exist" in proc.stderr and "Traceback" not in proc.stderr


def test_script_that_raises_keeps_its_exit_code_and_traceback(tmp_path):
    script = write(tmp_path, "boom.py", "raise SystemExit(7)\n")
    r = run_doctor([sys.executable, script], tmp_path)
    assert r.returncode == 7
    assert r.report["exit_code"] == 7
    script = write(tmp_path, "raises.py", "raise ValueError('user bug')\n")
    r = run_doctor([sys.executable, script], tmp_path)
    assert r.returncode == 1
    # The job's own traceback is the job's output, untouched; dldoctor adds none of its own.
    assert "ValueError: user bug" in r.stderr
    assert r.stderr.count("Traceback") == 1
    assert r.report["exit_code"] == 1


def test_job_without_a_dataloader_says_so(tmp_path):
    r = run_doctor([sys.executable, "-c", "import torch; print(torch.ones(2).sum())"], tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "unknown"
    assert r.report["loaders"] == []
    assert any("no DataLoader was seen" in n for n in r.report["notes"])
    assert "no DataLoader was seen" in r.stderr


def test_job_killed_by_a_signal_exits_128_plus_n(tmp_path):
    script = write(tmp_path, "kill.py", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)\n")
    r = run_doctor([sys.executable, script], tmp_path)
    assert r.returncode == 128 + 15
    assert r.report is not None


def test_shell_script_and_python_dash_m_are_instrumented(tmp_path):
    sh = write(
        tmp_path,
        "job.sh",
        f"""\
        #!/bin/sh
        exec "{sys.executable}" "{scenario("main_process_bound")[1]}" --healthy --seconds 2
        """,
    )
    os.chmod(sh, 0o755)
    r = run_doctor([sh], tmp_path)
    assert r.returncode == 0, r.stderr
    assert len(r.report["loaders"]) == 1
    assert r.report["loaders"][0]["batches"] > 10


@pytest.mark.alone  # the bottleneck is named from CPU time, while the job runs
def test_streaming_verdict_names_the_bottleneck_while_the_job_runs(tmp_path):
    """The early notice comes within 15 s of the loader's first batch, long before exit."""
    out = tmp_path / "r.json"
    cmd = [
        sys.executable,
        "-m",
        "dldoctor",
        "run",
        "--json",
        str(out),
        "--",
        *scenario("slow_collate", "--seconds", "40"),
    ]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    start = time.monotonic()
    line = ""
    try:
        while time.monotonic() - start < 35:
            line = proc.stderr.readline()
            if not line or "slow_collate" in line:
                break
        named_after = time.monotonic() - start
        assert "slow_collate" in line, line
        # Starting Python and torch takes a few seconds before the first batch.
        assert named_after < 20, named_after
        assert proc.poll() is None  # still running: it was named while running
        proc.send_signal(2)  # Ctrl-C: forwarded to the job; the report is still written
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    import json

    report = json.loads(out.read_text())
    assert report["verdict"] == "slow_collate"
    assert report["exit_code"] != 0  # the job was interrupted


@pytest.mark.alone  # a CPU-bound getitem named, and a fast loader's silence
def test_watch_and_profile_api(tmp_path):
    script = write(
        tmp_path,
        "api.py",
        """\
        import time, json, torch, dldoctor
        from torch.utils.data import DataLoader, Dataset

        class Slow(Dataset):
            def __len__(self): return 10_000
            def __getitem__(self, i):
                end = time.thread_time() + 0.01
                while time.thread_time() < end: pass
                return torch.ones(4)

        loader = DataLoader(Slow(), batch_size=4, num_workers=1)
        report = dldoctor.profile(loader, batches=60)
        print(json.dumps({"profile": report.verdict, "ids": report.ids()}))

        fast = DataLoader(torch.arange(4000).float(), batch_size=8, num_workers=1)
        with dldoctor.watch() as doc:
            for i, b in enumerate(fast):
                time.sleep(0.02)
                if i == 150: break
        r = doc.report()
        print(json.dumps({"watch": r.verdict, "loud": [f["id"] for f in r.findings if f["severity"] != "info"],
                          "batches": r.loaders[0]["batches"]}))
        """,
    )
    proc = subprocess.run([sys.executable, script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    import json

    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    assert lines[0]["profile"] == "slow_getitem", proc.stdout
    assert lines[1]["watch"] == "healthy", proc.stdout
    assert lines[1]["loud"] == []
    assert lines[1]["batches"] >= 150


@pytest.mark.parametrize("arg", ["--json", "--hang-timeout", "--on-hang"])
def test_run_options_are_listed_in_help(arg):
    proc = subprocess.run(
        [sys.executable, "-m", "dldoctor", "run", "--help"], capture_output=True, text=True
    )
    assert arg in proc.stdout


def test_run_help_lists_the_exit_codes():
    proc = subprocess.run(
        [sys.executable, "-m", "dldoctor", "run", "--help"], capture_output=True, text=True
    )
    text = proc.stdout
    assert "exit status:" in text, text
    for code in ("124", "126", "127", "2 "):
        assert code in text.split("exit status:", 1)[1], text
    assert "dldoctor run [options] -- python train.py" in text


def test_a_job_without_dashdash_gets_a_one_line_hint_and_is_not_run(tmp_path):
    marker = tmp_path / "ran"
    job = f"open({str(marker)!r}, 'w')"
    proc = subprocess.run(
        [sys.executable, "-m", "dldoctor", "run", "-q", "--json", str(tmp_path / "r.json"),
         "python", "-c", job],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "unrecognized arguments: -c" in proc.stderr, proc.stderr
    hints = [x for x in proc.stderr.splitlines() if x.startswith("hint:")]
    assert len(hints) == 1, proc.stderr
    # The same line with -- where it belongs, dldoctor's own options kept before it.
    assert hints[0].startswith("hint: put -- before the job's command: dldoctor run -q --json ")
    assert hints[0].endswith(" -- python -c " + __import__("shlex").quote(job)), hints[0]
    assert not marker.exists()
    # An unknown option of dldoctor's own, with the -- given: no hint about --.
    proc = subprocess.run(
        [sys.executable, "-m", "dldoctor", "run", "--no-such", "--", "python", "-c", "pass"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and "hint:" not in proc.stderr, proc.stderr


def test_report_prints_to_stdout_and_run_names_its_json(tmp_path):
    out = tmp_path / "r.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dldoctor", "run", "-q", "--json", str(out),
         "--", sys.executable, "-c", "pass"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    # Under run the job's stdout is the job's: the report and the path go to stderr.
    assert proc.stdout == ""
    assert "dldoctor verdict: unknown" in proc.stderr
    assert f"dldoctor: JSON report written to {out}" in proc.stderr, proc.stderr
    # `report` prints the report itself to stdout, so `> out.txt` keeps it.
    proc = subprocess.run(
        [sys.executable, "-m", "dldoctor", "report", str(out)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("dldoctor verdict: unknown"), proc.stdout
    assert proc.stderr == ""
    again = tmp_path / "again.json"
    proc = subprocess.run(
        [sys.executable, "-m", "dldoctor", "report", str(out), "--json", str(again)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert "dldoctor verdict: unknown" in proc.stdout and again.exists()


def test_exit_wait_sleeps_until_the_job_ends_and_keeps_its_code():
    from dldoctor.watcher.job_run import ExitWait

    child = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(0.4); raise SystemExit(3)"]
    )
    wait_exit = ExitWait(child)
    with pytest.raises(subprocess.TimeoutExpired):
        wait_exit(0.05)
    assert wait_exit(30) == 3
    assert wait_exit.fd == -1  # the pidfd is closed once the job is reaped
    killed = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    killed.kill()
    assert ExitWait(killed)(30) == -9
