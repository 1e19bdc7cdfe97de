"""Output paths checked before any work: a report that cannot be written is refused before the
job runs (one line, exit 2), not found out after the whole job has run."""

from __future__ import annotations

import os

from ..errors import DldoctorError


def check_output(path: str | None, option: str) -> None:
    """Raise a one-line DldoctorError unless `path` (the value of `option`) can be written: its
    folder exists and is writable, and the path is not a directory (nor an unwritable file)."""
    if not path:
        return
    if os.path.isdir(path):
        raise DldoctorError(f"{option} {path}: is a directory; give a file name")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise DldoctorError(f"{option} {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DldoctorError(f"{option} {path}: the folder {folder} is not writable")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise DldoctorError(f"{option} {path}: the file exists and is not writable")


def check_outputs(args, options=("json", "html", "trace")) -> None:
    """check_output() for each of `options` present on the parsed `args`."""
    for name in options:
        check_output(getattr(args, name, None), f"--{name}")
