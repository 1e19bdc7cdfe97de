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


# Commands that run a job given after `--`: without it, argparse takes the job's own options
# (`python -c ...`) for dldoctor's and refuses them; the error then says where `--` goes.
JOB_COMMANDS = ("run", "tune")


class _Parser(argparse.ArgumentParser):
    """argparse, with a hint beside "unrecognized arguments" when a job's command lacks `--`."""

    argv: list[str] = []

    def error(self, message: str):
        hint = _dashdash_hint(self, self.argv) if "unrecognized arguments" in message else ""
        if hint:
            self.print_usage(sys.stderr)
            self.exit(2, f"{self.prog}: error: {message}\n{hint}\n")
        super().error(message)


def _dashdash_hint(parser: argparse.ArgumentParser, argv: list[str]) -> str:
    """`hint: ... dldoctor run -- python -c ...` for `dldoctor run python -c ...`: `--` put
    before the first word that is neither an option of the command nor an option's value."""
    if not argv or argv[0] not in JOB_COMMANDS or "--" in argv:
        return ""
    sub = getattr(parser, "subparsers", {}).get(argv[0])
    if sub is None:
        return ""
    takes_value = {
        s for a in sub._actions if a.option_strings and a.nargs != 0 for s in a.option_strings
    }
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 1 if "=" in argv[i] or argv[i] not in takes_value else 2
    if i >= len(argv):
        return ""
    import shlex

    line = shlex.join(["dldoctor", *argv[:i], "--", *argv[i:]])
    return f"hint: put -- before the job's command: {line}"


def build_parser(commands: dict | None = None, only: str | None = None) -> argparse.ArgumentParser:
    """Every command's parser, or with `only` the options of that one command alone (the
    others keep their name and help: `dldoctor --help` lists them all). A command's module is
    imported only when its options are built: `dldoctor attach` on a busy node imports what
    it runs, not the whole tool."""
    parser = _Parser(prog="dldoctor", description="A doctor for PyTorch's DataLoader.")
    parser.subparsers = {}
    parser.add_argument("--version", action="version", version=f"dldoctor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, (_, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        parser.subparsers[name] = p
        if only is not None and name != only:
            continue
        command = (commands or {}).get(name) or _load(name)
        command.prepare_parser(p)
        p.set_defaults(_command=command)
    return parser


def _command_word(argv: list[str]) -> str | None:
    """The command argv names (its first word that is not an option), if it is one."""
    for a in argv:
        if not a.startswith("-"):
            return a if a in COMMANDS else None
    return None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    word = _command_word(argv)
    parser = build_parser(only=word) if word is not None else build_parser()
    parser.argv = argv
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
