"""dldoctor's error type: raised for what the user can fix, turned into one line by the CLI."""


class DldoctorError(Exception):
    """An error the user can act on. The message is one line: what went wrong and how to fix it."""

    exit_code = 2
