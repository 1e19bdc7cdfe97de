"""`dldoctor report F.json [--html F]`: re-render a saved report; `dldoctor report A.json
B.json ...`: several nodes' reports merged into one job view (report.merge_reports).
The report goes to stdout (`> out.txt` keeps it); notices and errors go to stderr."""

from __future__ import annotations

import os
import sys


class Command:
    def prepare_parser(self, parser) -> None:
        parser.add_argument(
            "paths",
            metavar="F.json",
            nargs="+",
            help="a report written by run --json; several: one per node, merged into one job",
        )
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
        reports = [Report.read_json(p) for p in args.paths]
        if len(reports) == 1:
            report = reports[0]
        else:
            from ..report import merge_reports

            report = merge_reports(reports, _node_names(args.paths))
        terminal.print_report(report, file=sys.stdout)
        if args.json:
            report.write_json(args.json)
        if args.html:
            html.write(args.html, report)
            print(f"dldoctor: HTML report written to {args.html}", file=sys.stderr)
        return 0


def _node_names(paths: list[str]) -> list[str]:
    """Each report's node name: its file name without .json (the path when two share one)."""
    names = [os.path.splitext(os.path.basename(p))[0] for p in paths]
    return names if len(set(names)) == len(names) else list(paths)
