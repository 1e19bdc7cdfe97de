"""The JSON report (schema 1): the Report as it is, for machines and for `dldoctor report`."""

from __future__ import annotations


def write(report, path: str) -> None:
    report.write_json(path)
