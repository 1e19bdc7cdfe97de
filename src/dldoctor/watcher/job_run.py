"""The run loop of `dldoctor run`: starts the job in its own process group, hands it the
terminal, forwards signals, polls the watcher (side logs, streaming verdict, risks, hangs),
and writes the reports when the job ends, crashes, is interrupted or hangs."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time

from ..errors import DldoctorError

POLL_S = 0.25  # how often the watcher reads side logs and the streaming verdict
# `--on-hang abort` ends the job and exits with this code, as timeout(1) does for a command
# it had to stop: the job's own code would not say that it was ended from outside.
HANG_ABORT_EXIT = 124
TRACE_MAX_EVENTS = 1_000_000  # --trace keeps this many events (64 MiB); the trace says when cut
ABORT_GRACE_S = 3.0  # SIGTERM first, so the job can clean up; SIGKILL after this
FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


class ExitWait:
    """Waits up to `timeout` seconds for the job to end (its exit code, or TimeoutExpired),
    asleep in between: on a pidfd where the kernel has one. Popen.wait(timeout) wakes up
    every 0.5-50 ms to look, ~40 times a second of POLL_S waits, each a context switch on
    CPUs a fast loader's main process and workers keep busy."""

    def __init__(self, child: subprocess.Popen):
        self.child = child
        self.fd = -1
        try:
            self.fd = os.pidfd_open(child.pid)
        except (AttributeError, OSError):  # no pidfd (Linux < 5.3, Python < 3.9): poll
            pass

    def __call__(self, timeout: float) -> int:
        if self.fd < 0:
            return self.child.wait(timeout=timeout)
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            raise subprocess.TimeoutExpired(self.child.args, timeout)
        self.close()
        return self.child.wait()

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    __del__ = close


class JobRun:
    def __init__(self, cmd: list[str], args):
        self.cmd = cmd
        self.args = args
        self.child: subprocess.Popen | None = None
        self.tty_fd: int | None = None
        self._old_handlers: dict = {}
        self._signals_seen = 0
        self.aborted = False
        self._watch_broken = ""
        self.live = None  # reporters.live.LiveView with --live on a terminal

    # -- the job's process group and the terminal -----------------------------------------
    def _spawn(self, env: dict) -> subprocess.Popen:
        # The job gets its own process group so that the whole tree can be signalled (and,
        # on a terminal, made the foreground group: Ctrl-C then reaches the job, as it would
        # without dldoctor, and dldoctor keeps running to write the report).
        out = {}
        if self.live is not None:  # its output goes above the live panel
            out_fd = self.live.job_output()
            out = {"stdout": out_fd, "stderr": out_fd}
        try:
            if sys.version_info >= (3, 11):
                return subprocess.Popen(self.cmd, env=env, process_group=0, **out)
            return subprocess.Popen(self.cmd, env=env, preexec_fn=os.setpgrp, **out)
        except FileNotFoundError:
            from .watcher import command_not_found

            raise command_not_found(self.cmd[0]) from None
        except PermissionError:
            err = DldoctorError(f"permission denied: cannot execute {self.cmd[0]}")
            err.exit_code = 126
            raise err from None
        finally:
            if out:
                os.close(out["stdout"])  # the job holds it now

    def _give_terminal(self, pgid: int) -> None:
        try:
            fd = sys.stdin.fileno()
            if not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp():
                return
        except (OSError, ValueError):
            return
        old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        try:
            os.tcsetpgrp(fd, pgid)
            self.tty_fd = fd
        except OSError:
            pass
        finally:
            signal.signal(signal.SIGTTOU, old)

    def _take_terminal_back(self) -> None:
        if self.tty_fd is None:
            return
        old = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
        try:
            os.tcsetpgrp(self.tty_fd, os.getpgrp())
        except OSError:
            pass
        finally:
            signal.signal(signal.SIGTTOU, old)
            self.tty_fd = None

    def _forward(self, signum, _frame) -> None:
        self._signals_seen += 1
        if self.child is None:
            return
        # A third interrupt means the job ignores them: end it for good.
        sig = signal.SIGKILL if self._signals_seen >= 3 else signum
        try:
            os.killpg(self.child.pid, sig)
        except ProcessLookupError:
            pass

    def _install_handlers(self) -> None:
        for sig in FORWARDED_SIGNALS:
            self._old_handlers[sig] = signal.signal(sig, self._forward)

    def _restore_handlers(self) -> None:
        for sig, handler in self._old_handlers.items():
            signal.signal(sig, handler)

    def _env(self, watcher) -> dict:
        from ..job import settings

        env = watcher.child_env()
        overrides = getattr(self.args, "overrides", None)
        if overrides:
            env[settings.ENV] = settings.to_env(overrides)
        else:
            env.pop(settings.ENV, None)  # an outer run's, not this one's
        return env

    # -- the run ---------------------------------------------------------------------
    def run(self) -> int:
        from ..reporters import terminal
        from .watcher import Watcher

        watcher = Watcher(
            hang_timeout_s=self.args.hang_timeout,
            trace_max_events=TRACE_MAX_EVENTS if self.args.trace else 0,
        )
        try:
            watcher.collect_facts()
            self._install_handlers()
            self._start_live(watcher)
            self.child = self._spawn(self._env(watcher))
            self._give_terminal(self.child.pid)
            watcher.start(self.child.pid)
            code = self._wait(watcher)
            self._take_terminal_back()
            self._stop_live()
            try:
                report = watcher.finish(command=self.cmd, exit_code=code)
            except Exception as e:  # a dldoctor bug: one line, and the job's own exit code
                print(
                    f"dldoctor: error: could not build the report: {type(e).__name__}: {e}",
                    file=sys.stderr,
                )
                return HANG_ABORT_EXIT if self.aborted else code
            if self.aborted:
                report.notes.append(
                    f"dldoctor ended the job after the hang (--on-hang abort): exit {HANG_ABORT_EXIT}"
                )
            terminal.print_report(report)
            if self.args.json:
                path = _write_or_fallback(report.write_json, self.args.json, ".json", "JSON report")
                print(f"dldoctor: JSON report written to {path}", file=sys.stderr)
            self._write_html_and_trace(watcher, report)
            return HANG_ABORT_EXIT if self.aborted else code
        finally:
            self._stop_live()
            self._take_terminal_back()
            self._restore_handlers()
            if self.child is not None and self.child.poll() is None:
                try:
                    os.killpg(self.child.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.child.wait()
            watcher.cleanup()

    # -- --live, --html, --trace -----------------------------------------------------------
    def _start_live(self, watcher) -> None:
        if not self.args.live:
            return
        from ..reporters.live import LiveView

        view = LiveView(watcher, self.cmd)
        if not view.usable:
            print("dldoctor: --live needs a terminal; going on without it", file=sys.stderr)
            return
        self.live = view.__enter__()

    def _stop_live(self) -> None:
        if self.live is not None:
            live, self.live = self.live, None
            live.stop()

    def _write_html_and_trace(self, watcher, report) -> None:
        if self.args.html:
            from ..reporters import html

            path = _write_or_fallback(
                lambda p: html.write(p, report), self.args.html, ".html", "HTML report"
            )
            print(f"dldoctor: HTML report written to {path}", file=sys.stderr)
        if self.args.trace:
            from ..reporters import chrome_trace

            events = watcher.monitor.trace_events()
            path = _write_or_fallback(
                lambda p: chrome_trace.write(p, events, report), self.args.trace, ".json", "trace"
            )
            print(
                f"dldoctor: trace written to {path} (open it in ui.perfetto.dev)",
                file=sys.stderr,
            )

    def _on_hang(self, watcher) -> None:
        """Print the hang diagnosis (and the report so far) now: the job may never end."""
        from ..reporters import terminal

        report = watcher.hang_report(command=self.cmd)
        print("dldoctor: no batch for the hang timeout; the job is stuck", file=sys.stderr)
        if self.args.json:
            report.write_json(self.args.json)
        if self.args.on_hang == "abort" and self.child is not None:  # the final report follows
            self.aborted = True
            print(
                f"dldoctor: ending the job (--on-hang abort), exit code {HANG_ABORT_EXIT}",
                file=sys.stderr,
            )
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(self.child.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.child.wait(timeout=ABORT_GRACE_S)
                    break
                except subprocess.TimeoutExpired:
                    continue
        else:
            if self.live is not None:
                # A console of its own would write past the live panel (rich unwraps the
                # panel's stderr proxy): print through the panel's console, above it.
                self.live.console.print(terminal.renderable(report))
            else:
                terminal.print_report(report)
            print("dldoctor: still waiting (--on-hang report); Ctrl-C to stop", file=sys.stderr)

    def _wait(self, watcher) -> int:
        from .. import _ext

        assert self.child is not None
        recent_s = _ext.RECENT_WINDOW_S  # what the early notices look at
        start = time.monotonic()
        wait_exit = ExitWait(self.child)
        while True:
            try:
                rc = wait_exit(POLL_S)
                break
            except subprocess.TimeoutExpired:
                pass
            if self._watch_broken:
                continue  # the analysis failed once: only wait for the job now
            try:
                watcher.poll()
                if self.live is not None:
                    self.live.tick()
                hang = watcher.new_hang()
                if hang is not None:
                    self._on_hang(watcher)
                    continue
                top = watcher.newly_named()
                if top is not None and not self.args.quiet:
                    print(
                        f"dldoctor: [{top['seen_s']:.1f} s] {top['id']}: {top['title']} "
                        f"(over the last {recent_s:g} s)",
                        file=sys.stderr,
                        flush=True,
                    )
                for risk in watcher.new_risks():  # a failure coming: say it while there is time
                    if not self.args.quiet:
                        print(
                            f"dldoctor: [{time.monotonic() - start:.1f} s] warning, {risk['id']}: "
                            f"{risk['title']}",
                            file=sys.stderr,
                            flush=True,
                        )
            except Exception as e:  # a dldoctor bug must never end or disturb the job
                self._watch_broken = f"{type(e).__name__}: {e}"
                print(
                    f"dldoctor: the live analysis failed ({self._watch_broken}); "
                    "the job goes on, the report may be partial",
                    file=sys.stderr,
                    flush=True,
                )
        return rc if rc >= 0 else 128 - rc


def _write_or_fallback(write, path: str, suffix: str, what: str) -> str:
    """write(path); when that fails at the end of the run (the folder went away, the disk is
    full), write a temporary file instead and say where: the job's exit code is kept and
    the report not lost. The path written."""
    try:
        write(path)
        return path
    except (DldoctorError, OSError) as e:
        fd, tmp = tempfile.mkstemp(prefix="dldoctor-", suffix=suffix)
        os.close(fd)
        write(tmp)
        print(
            f"dldoctor: could not write the {what} to {path} ({e}); written to {tmp}",
            file=sys.stderr,
        )
        return tmp
