"""`dldoctor report`."""

from __future__ import annotations

from ..errors import DldoctorError


class Command:
    def prepare_parser(self, parser) -> None:
        pass

    def run(self, args) -> int:
        raise DldoctorError("'report' is not built yet")
