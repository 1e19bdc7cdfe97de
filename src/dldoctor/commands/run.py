"""`dldoctor run [options] -- COMMAND [ARGS...]`: run a job, watch every DataLoader in it,
diagnose. Exits with the job's own exit code (128+N when a signal ended it)."""

from __future__ import annotations

from ..errors import DldoctorError
from ..watcher.job_run import HANG_ABORT_EXIT


def parse_overrides(items: list[str]) -> dict:
    """--set items, validated before the job starts (a bad one: one line, exit 2)."""
    from ..job import settings

    try:
        return settings.parse(items)
    except ValueError as e:
        raise DldoctorError(str(e)) from None


EPILOG = f"""\
Put -- before the job's command: dldoctor run [options] -- python train.py --lr 0.1

exit status: the job's own exit code (128+N when signal N ended it);
  {HANG_ABORT_EXIT}  --on-hang abort ended a job that hung;
  126  the command cannot be executed (permission denied);
  127  the command does not exist;
  2    dldoctor's own usage errors (a bad option or --set, an unwritable --json/--html/--trace
       path): one line, and the job is not run.
The report is printed on stderr (the job's stdout stays the job's own); --json F writes it as
JSON. A report that cannot be written at the end goes to a temporary file, and the exit status
stays the job's.
"""


class Command:
    def prepare_parser(self, parser) -> None:
        import argparse

        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = EPILOG
        parser.add_argument("--json", metavar="F", help="write the JSON report (schema 1) to F")
        parser.add_argument("--html", metavar="F", help="write a self-contained HTML report to F")
        parser.add_argument("--trace", metavar="F", help="write a Chrome/Perfetto trace to F")
        parser.add_argument(
            "--hang-timeout",
            metavar="S",
            type=float,
            default=None,
            help="seconds without a batch before the hang doctor acts (default: adaptive, >= 60)",
        )
        parser.add_argument(
            "--on-hang",
            choices=("report", "abort"),
            default="report",
            help="report: print the diagnosis and keep waiting (default); "
            f"abort: also end the job and exit {HANG_ABORT_EXIT}",
        )
        parser.add_argument(
            "--set",
            dest="overrides",
            action="append",
            default=[],
            metavar="[loaderN.]KEY=VALUE",
            help="override a DataLoader setting without editing the job: num_workers, "
            "prefetch_factor, persistent_workers, pin_memory, multiprocessing_context, in_order, "
            "worker_threads (each worker's thread pools), batch_size (changes training: only "
            "when asked for); for every loader, or loaderN. for the N-th one each process "
            "constructs (repeatable)",
        )
        parser.add_argument("--live", action="store_true", help="a top-like view while it runs")
        parser.add_argument("-q", "--quiet", action="store_true", help="no early notices")
        parser.add_argument("cmd", nargs="*", metavar="-- COMMAND", help="the job to run")

    def run(self, args) -> int:
        cmd = list(args.cmd)
        if cmd and cmd[0] == "--":
            cmd = cmd[1:]
        if not cmd:
            raise DldoctorError("no command given: dldoctor run [options] -- python train.py")
        args.overrides = parse_overrides(getattr(args, "overrides", None) or [])
        from .paths import check_outputs

        check_outputs(args)  # before the job runs, not after it
        if args.html:
            from ..reporters import html

            html.require_plotly()  # before the job runs, not after it
        from ..watcher.job_run import JobRun

        return JobRun(cmd, args).run()
