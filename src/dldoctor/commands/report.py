"""`dldoctor report F.json [--html F]`: re-render a saved report."""

from __future__ import annotations

from ..errors import DldoctorError


class Command:
    def prepare_parser(self, parser) -> None:
        parser.add_argument("path", metavar="F.json", help="a report written by run --json")
        parser.add_argument("--html", metavar="F", help="write a self-contained HTML report to F")
        parser.add_argument("--json", metavar="F", help="write the report again as JSON")

    def run(self, args) -> int:
        from .._report import Report
        from ..reporters import terminal

        report = Report.read_json(args.path)
        if args.html:
            raise DldoctorError("--html is not available in this version yet")
        terminal.print_report(report)
        if args.json:
            report.write_json(args.json)
        return 0
