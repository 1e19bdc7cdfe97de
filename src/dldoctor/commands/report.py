"""`dldoctor report F.json [--html F]`: re-render a saved report."""

from __future__ import annotations

import sys


class Command:
    def prepare_parser(self, parser) -> None:
        parser.add_argument("path", metavar="F.json", help="a report written by run --json")
        parser.add_argument("--html", metavar="F", help="write a self-contained HTML report to F")
        parser.add_argument("--json", metavar="F", help="write the report again as JSON")

    def run(self, args) -> int:
        from ..report import Report
        from ..reporters import terminal
        from .paths import check_outputs

        check_outputs(args, ("json", "html"))
        if args.html:
            from ..reporters import html

            html.require_plotly()
        report = Report.read_json(args.path)
        terminal.print_report(report)
        if args.json:
            report.write_json(args.json)
        if args.html:
            html.write(args.html, report)
            print(f"dldoctor: HTML report written to {args.html}", file=sys.stderr)
        return 0
