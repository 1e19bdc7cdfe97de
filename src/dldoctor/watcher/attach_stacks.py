"""`dldoctor attach`, the stack layer: py-spy, run as its own process, reads a target's Python
stacks from its memory without pausing it (--nonblocking) and without a signal.

While watching, one `py-spy record` per process samples every thread a few times a second
(one long-lived reader per process costs about a millisecond a sample; a `py-spy dump` per
sample costs ten times that, most of it py-spy finding the interpreter again). Its
speedscope file is read back as each thread's distinct stacks with their counts. A failed
sample is counted (py-spy's "Errors: N"), never a crash. `py-spy dump` gives one full look
at every thread: to tell which loader a worker serves, and when the tree looks stuck.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field

from ..errors import DldoctorError

DUMP_TIMEOUT_S = 10.0  # a dump takes tens of milliseconds; a hung py-spy is given up on
# The stack samples' CPU budget: py-spy costs about 1 ms of CPU per sample of a process
# (measured: 0.14 s for 130 samples of a forked worker), so 12 samples/s over all processes
# is ~1.2% of one core; with the /proc sampler and the command's own start-up the attach
# costs ~0.4 s of CPU per 10 s window (bench/attach_overhead.py). A job of a main process and
# two workers gets 4 samples a second of each, 40 in the default 10 s window: a share to
# within about 8 points, enough against the rules' cuts (5% stall, 20% idle, 50% on CPU);
# a longer --seconds narrows it.
SAMPLES_PER_S = 12
MAX_RATE = 20  # per process
MIN_RATE = 2  # a tree of more than 10 processes goes over the budget rather than below this

PTRACE_FIX = (
    "reading another process's Python stacks needs the same user and a permissive "
    "/proc/sys/kernel/yama/ptrace_scope (0, or 1 for the process's own children), or "
    "CAP_SYS_PTRACE: run as root, or `sudo dldoctor attach ...`; in a container, start it "
    "with `docker run --cap-add SYS_PTRACE` (Kubernetes: securityContext.capabilities.add: "
    "[SYS_PTRACE])"
)


def pyspy() -> str:
    """The py-spy binary: beside this Python (the wheel installs it into the environment's
    bin), else on PATH."""
    here = os.path.join(os.path.dirname(sys.executable), "py-spy")
    # Checked as the effective user, who runs it: a real uid that differs (setpriv, a setuid
    # wrapper) would otherwise be refused a binary this process can run.
    effective = os.access in os.supports_effective_ids
    if os.access(here, os.X_OK, effective_ids=effective):
        return here
    found = shutil.which("py-spy")
    if found:
        return found
    raise DldoctorError(
        "py-spy is not installed (dldoctor attach reads the job's stacks with it): "
        "pip install py-spy"
    )


def rate_for(processes: int) -> int:
    """Samples per second per process within SAMPLES_PER_S."""
    return max(MIN_RATE, min(MAX_RATE, SAMPLES_PER_S // max(1, processes)))


def refused(text: str) -> bool:
    """py-spy's words for a ptrace refusal."""
    return "Permission denied" in text or "Operation not permitted" in text


@dataclass
class Dump:
    pid: int
    threads: list | None  # py-spy's JSON: [{thread_name, os_thread_id, frames: [...]}]
    error: str = ""
    permission: bool = False


def dump(pid: int, with_locals: bool = False) -> Dump:
    cmd = [pyspy(), "dump", "--pid", str(pid), "--json", "--nonblocking"]
    if with_locals:
        cmd.append("--locals")
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=DUMP_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return Dump(pid, None, "py-spy dump timed out")
    if r.returncode != 0:
        return Dump(pid, None, _first_error(r.stderr), refused(r.stderr))
    try:
        return Dump(pid, json.loads(r.stdout))
    except json.JSONDecodeError:
        return Dump(pid, None, "py-spy dump wrote no JSON")


def _first_error(stderr: str) -> str:
    for line in stderr.splitlines():
        line = line.strip()
        if line.startswith("Error:"):
            return line[len("Error:") :].strip()
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    return lines[0] if lines else "py-spy failed"


@dataclass
class Samples:
    """One process's samples: py-spy's frame table and, per thread, (name, tid, [(frame
    indices root first, count)])."""

    pid: int
    frames: list = field(default_factory=list)
    threads: list = field(default_factory=list)
    failed: int = 0
    taken: int = 0  # sampling ticks that read the process
    error: str = ""
    permission: bool = False


_THREAD = re.compile(r'Thread (\d+) "(.*)"')
_ERRORS = re.compile(r"Samples: (\d+) Errors: (\d+)")


class Recorder:
    """`py-spy record` of one process for `seconds`, into a speedscope file in `folder`."""

    def __init__(self, pid: int, seconds: float, rate: int, folder: str):
        self.pid = pid
        self.rate = rate
        self.path = os.path.join(folder, f"stacks-{pid}.json")
        cmd = [
            pyspy(),
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(rate),
            "--duration",
            str(max(1, round(seconds))),
            "--nonblocking",
            "--idle",
            "--full-filenames",
            "--format",
            "speedscope",
            "--output",
            self.path,
        ]
        # Its own session: a Ctrl-C meant for dldoctor must not end the recording before it
        # writes what it has (stop() ends it with SIGINT, which makes it write).
        self.proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            start_new_session=True,
        )

    def running(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """Ends the recording early; py-spy writes the samples taken so far."""
        if self.proc.poll() is None:
            try:
                self.proc.send_signal(2)  # SIGINT: py-spy's own way to stop and write
            except ProcessLookupError:
                pass

    def result(self, timeout: float = 15.0) -> Samples:
        try:
            out, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, err = self.proc.communicate()
        s = Samples(self.pid)
        m = _ERRORS.search(out or "")
        if m:
            s.failed = int(m.group(2))
        try:
            with open(self.path, encoding="utf-8") as f:
                data = json.load(f)
        except (OSError, json.JSONDecodeError):
            s.error = _first_error(err or "") if self.proc.returncode else "py-spy wrote no samples"
            s.permission = refused(err or "")
            return s
        finally:
            try:
                os.unlink(self.path)
            except OSError:
                pass
        table = (data.get("shared") or {}).get("frames") or []
        s.frames = [(f.get("name") or "", f.get("file") or "", f.get("line")) for f in table]
        # Pseudo-frames some py-spy options add at the root ("thread (123): MainThread").
        pseudo = {
            i
            for i, (name, file, _) in enumerate(s.frames)
            if not file and name.startswith(("thread (", "process "))
        }
        for p in data.get("profiles") or []:
            m = _THREAD.match(p.get("name") or "")
            name, tid = (m.group(2), int(m.group(1))) if m else (p.get("name") or "", 0)
            counts = Counter(
                tuple(i for i in sample if i not in pseudo) for sample in p.get("samples") or []
            )
            s.taken = max(s.taken, sum(counts.values()))
            s.threads.append((name, tid, [(list(k), n) for k, n in counts.items()]))
        return s
