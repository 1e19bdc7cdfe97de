"""`dldoctor attach PID [--seconds S] [--json F] [--html F]`: diagnose a job started without
dldoctor, while it runs or while it is stuck, without restarting or disturbing it."""

from __future__ import annotations

from ..errors import DldoctorError
from ..watcher.attach_find import EXIT_NO_DATALOADER, EXIT_NO_PROCESS, EXIT_NOT_PYTHON

EPILOG = f"""\
PID may be the training script's process, one of its DataLoader workers, or a torchrun
agent (all its ranks are then read). Read-only: the job is never signalled or paused; its
Python stacks are read with py-spy, which needs the same user and a permissive
kernel.yama.ptrace_scope, or CAP_SYS_PTRACE (in a container: --cap-add SYS_PTRACE); without it
only what /proc shows is diagnosed.

exit codes: 0 a report was made (whatever its verdict); 2 bad arguments or py-spy missing;
{EXIT_NO_PROCESS} no such process; {EXIT_NOT_PYTHON} not a Python process; {EXIT_NO_DATALOADER} a Python process that runs no DataLoader.
"""


class Command:
    def prepare_parser(self, parser) -> None:
        import argparse

        from ..watcher.attach import DEFAULT_SECONDS

        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = EPILOG
        parser.add_argument("pid", metavar="PID", help="a process of the job")
        parser.add_argument(
            "--seconds",
            metavar="S",
            type=float,
            default=DEFAULT_SECONDS,
            help=f"how long to watch (default {DEFAULT_SECONDS:g})",
        )
        parser.add_argument("--json", metavar="F", help="write the JSON report (schema 1) to F")
        parser.add_argument("--html", metavar="F", help="write a self-contained HTML report to F")

    def run(self, args) -> int:
        try:
            pid = int(args.pid)
        except ValueError:
            raise DldoctorError(f"PID must be a process id, not {args.pid!r}") from None
        if pid <= 0:
            raise DldoctorError(f"PID must be a positive process id, not {pid}")
        if not args.seconds > 0:
            raise DldoctorError(f"--seconds must be a positive number, not {args.seconds:g}")
        if args.html:
            from ..reporters import html

            html.require_plotly()
        from ..watcher.attach import AttachRun

        return AttachRun(pid, args.seconds, args).run()
