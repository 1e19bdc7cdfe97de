"""The command line: one module per subcommand under dldoctor.commands.

main() maps DldoctorError (and the core's CoreError) once, to one line and an exit code.
"""

from __future__ import annotations

import argparse
import sys

from . import __version__
from .errors import DldoctorError

# name -> module path; each module has a Command class with prepare_parser(parser) and run(args).
COMMANDS = {
    "check": ("dldoctor.commands.check", "is this machine set up to feed a GPU?"),
    "run": ("dldoctor.commands.run", "run a job, watch every DataLoader in it, diagnose"),
    "report": ("dldoctor.commands.report", "re-render a saved JSON report"),
    "attach": ("dldoctor.commands.attach", "diagnose a job already running or stuck, by PID"),
    "tune": (
        "dldoctor.commands.tune",
        "run the job with DataLoader settings overridden, report the fastest "
        "(each trial runs the job's own code)",
    ),
}


def _load(name: str):
    import importlib

    module = importlib.import_module(COMMANDS[name][0])
    return module.Command()


def build_parser(commands: dict | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dldoctor", description="A doctor for PyTorch's DataLoader."
    )
    parser.add_argument("--version", action="version", version=f"dldoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (_, help_text) in COMMANDS.items():
        command = (commands or {}).get(name) or _load(name)
        p = sub.add_parser(name, help=help_text, description=help_text)
        command.prepare_parser(p)
        p.set_defaults(_command=command)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args._command.run(args) or 0)
    except DldoctorError as e:
        print(f"dldoctor: error: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("dldoctor: interrupted", file=sys.stderr)
        return 130
    except Exception as e:  # the core's CoreError, or a bug: still one line, never a traceback
        from ._ext import CoreError

        if isinstance(e, CoreError):
            print(f"dldoctor: error: {e}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
