"""`dldoctor check`: is this machine set up to feed a GPU? Reads the machine facts, runs the
preflight checks (`_preflight`) and prints them as a table, or as JSON with every fact."""

from __future__ import annotations

import json
import os
import sys

from .. import __version__
from ..errors import DldoctorError

EPILOG = """\
exit status: 0 when no check FAILs (WARN and UNKNOWN included), 1 when any check FAILs,
2 on bad input (a missing --data-dir, a malformed size).

sizes: K/M/G/T are powers of 1000 and Ki/Mi/Gi/Ti powers of 1024 (64M, 512Mi, 2G).
Without --data-dir the check takes well under 2 s (one second more when the CPU is contended: it
then names the processes using it most over that second). torch is imported only when a GPU driver
is present and the installed torch is not a CPU-only build (to read each device's free
memory); --no-cuda skips that.
"""


class Command:
    def prepare_parser(self, parser) -> None:
        import argparse

        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = EPILOG
        parser.add_argument(
            "--data-dir",
            metavar="DIR",
            help="also check the storage of this dataset folder (or file): filesystem, disk, "
            "a bounded file count and a read probe that bypasses the page cache",
        )
        parser.add_argument(
            "--json", metavar="F", help="write every fact and check as JSON to F ('-' = stdout)"
        )
        parser.add_argument(
            "--ranks",
            metavar="N",
            help="training processes on this node sharing its CPUs and /dev/shm "
            "(default: $LOCAL_WORLD_SIZE, else 1)",
        )
        parser.add_argument(
            "--batch-bytes",
            metavar="B",
            help="bytes of one batch's tensors (default: 64x3x224x224 float32 = 36.75 MiB)",
        )
        parser.add_argument(
            "--num-workers",
            metavar="N",
            type=int,
            help="num_workers of your loader (default: the largest this machine sustains)",
        )
        parser.add_argument(
            "--max-seconds",
            metavar="S",
            type=float,
            default=4.0,
            help="time bound of the --data-dir file count and read probe (default 4)",
        )
        parser.add_argument(
            "--no-cuda", action="store_true", help="never import torch to look for GPUs"
        )

    def run(self, args) -> int:
        from ..preflight import checks as _preflight
        from ..preflight import facts as _facts

        ranks = _ranks(args.ranks)
        batch_bytes = _size(args.batch_bytes) if args.batch_bytes else None
        if args.num_workers is not None and args.num_workers < 0:
            raise DldoctorError(f"--num-workers must be 0 or more, not {args.num_workers}")
        data_dir = args.data_dir
        if data_dir is not None and not os.path.exists(data_dir):
            raise DldoctorError(f"data directory not found: {data_dir}")

        facts = _facts.collect(cuda="never" if args.no_cuda else "auto")
        if data_dir is not None:
            facts["storage"] = _probe_storage(data_dir, args.max_seconds)
        if _preflight.cpu_contended(facts):  # name who competes: one more second, only then
            facts["cpu_top"] = _top_cpu_users()

        usable = (facts.get("cpu") or {}).get("usable")
        if args.num_workers is not None:
            workers = args.num_workers
        elif usable is not None:
            workers = _preflight.workers_per_rank(usable, ranks)
        else:
            workers = 2  # the usable CPUs are unknown: a common small setting
        assumptions = _preflight.Assumptions(
            ranks=ranks,
            batch_bytes=batch_bytes or _preflight.DEFAULT_BATCH_BYTES,
            batch_bytes_given=batch_bytes is not None,
            num_workers=workers,
            num_workers_given=args.num_workers is not None,
        )
        checks = [c.to_dict() for c in _preflight.run_checks(facts, assumptions)]
        exit_code = 1 if any(c["status"] == _preflight.FAIL for c in checks) else 0

        if args.json:
            doc = {
                "schema": 1,
                "tool_version": __version__,
                "facts": facts,
                "assumptions": assumptions.to_dict(),
                "checks": checks,
                "exit_code": exit_code,
            }
            _write_json(doc, args.json)
        if args.json != "-":
            from ..reporters import check_table

            check_table.render(checks, assumptions.to_dict())
        return exit_code


def _ranks(text: str | None) -> int:
    source = "--ranks"
    if text is None:
        text, source = os.environ.get("LOCAL_WORLD_SIZE"), "LOCAL_WORLD_SIZE"
        if not text:
            return 1
    try:
        ranks = int(text)
    except ValueError:
        raise DldoctorError(f"{source} must be a whole number, not {text!r}") from None
    if ranks < 1:
        raise DldoctorError(f"{source} must be 1 or more, not {ranks}")
    return ranks


def _size(text: str) -> int:
    from ..preflight.checks import parse_size

    try:
        n = parse_size(text)
    except ValueError as e:
        raise DldoctorError(f"--batch-bytes: {e}") from None
    if n <= 0:
        raise DldoctorError(f"--batch-bytes must be more than 0, not {text!r}")
    return n


def _probe_storage(path: str, max_seconds: float) -> dict:
    from .. import _ext

    try:
        return dict(_ext.probe_storage(path, max_seconds=max_seconds))
    except _ext.CoreError as e:
        raise DldoctorError(str(e)) from None


def _top_cpu_users() -> list[dict]:
    from .. import _ext
    from ..preflight import checks as _preflight

    return list(
        _ext.top_cpu_users(
            window_s=_preflight.TOP_CPU_WINDOW_S,
            count=_preflight.TOP_CPU_COUNT,
            min_pct=_preflight.TOP_CPU_MIN_PCT,
        )
    )


def _write_json(doc: dict, target: str) -> None:
    text = json.dumps(doc, indent=2, sort_keys=False) + "\n"
    if target == "-":
        sys.stdout.write(text)
        return
    try:
        with open(target, "w") as f:
            f.write(text)
    except OSError as e:
        raise DldoctorError(f"cannot write {target}: {e.strerror}") from None
