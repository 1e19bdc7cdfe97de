"""Diagnosis accuracy: every scenario of tests/scenarios/catalog.py run under `dldoctor run`,
each --repeat times; prints a confusion table (expected id x verdict and findings), the
false-positive rate on the healthy twins (runs with any warning or critical finding, or
the id a "no <id>" twin must not report), and when the early notice named the expected
finding while the job ran (seconds from its start, median over the runs).

    python bench/accuracy.py [--repeat N] [--only SUBSTR ...] [--json F]

Real jobs with real faults: some need root, a mount namespace or a memory cgroup and are
skipped, with the reason, where the machine refuses. One run at a time (the jobs measure CPU
contention, so running them side by side would change what they measure). Not a test.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))

from doctor_run import catalog, run_entry_once  # noqa: E402

SEVERITY = {"info": 0, "warning": 1, "critical": 2}


def judge(entry: dict, report: dict | None) -> dict:
    """What one run produced against what the entry expects (its `expect`; the entry's other
    checks are the tests')."""
    if report is None:
        return {"outcome": "error", "verdict": None, "loud": [], "ids": []}
    findings = report.get("findings") or []
    loud = [f["id"] for f in findings if SEVERITY.get(f.get("severity"), 0) >= 1]
    ids = [f["id"] for f in findings]
    expect = entry["expect"]
    if catalog.is_twin(entry):
        ok = not loud and catalog.absent_id(entry) not in ids
        outcome = "ok" if ok else "false_positive"
    else:
        least = SEVERITY[entry.get("severity", "warning")]
        hit = any(
            f["id"] == expect and SEVERITY.get(f.get("severity"), 0) >= least for f in findings
        )
        outcome = "ok" if hit else "missed"
    return {"outcome": outcome, "verdict": report.get("verdict"), "loud": loud, "ids": ids}


def run_one(entry: dict, tmp: str) -> dict:
    import pytest  # tests/_faults.py and doctor_run say no with pytest.skip

    start = time.monotonic()
    try:
        r = run_entry_once(entry, tmp)
    except pytest.skip.Exception as e:
        return {"outcome": "skipped", "reason": str(e), "seconds": time.monotonic() - start}
    except Exception as e:  # a timeout or a crash of the runner: counted, never fatal
        return {
            "outcome": "error",
            "reason": f"{type(e).__name__}: {e}",
            "verdict": None,
            "loud": [],
            "ids": [],
            "seconds": time.monotonic() - start,
        }
    res = judge(entry, r.report)
    res["returncode"] = r.returncode
    if not catalog.is_twin(entry):
        res["notice_s"] = r.notice_s(entry["expect"])  # named while it ran, after so long
    res["seconds"] = time.monotonic() - start
    if r.report is None:
        res["reason"] = (r.stderr.strip().splitlines() or ["no report"])[-1]
    return res


def table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for k, r in enumerate(rows):
        out.append("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if k == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def counts(values) -> str:
    c = collections.Counter(values)
    return ", ".join(f"{k} x{n}" if n > 1 else k for k, n in c.most_common()) or "-"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1, help="runs per scenario (default 1)")
    ap.add_argument("--only", nargs="*", default=[], help="scenarios whose name contains any")
    ap.add_argument("--json", help="write every run's outcome here")
    args = ap.parse_args()
    if args.repeat < 1:
        print("--repeat must be at least 1", file=sys.stderr)
        return 2

    entries = catalog.SCENARIOS
    if args.only:
        entries = [e for e in entries if any(s in e["name"] for s in args.only)]
    if not entries:
        print("no scenario matches", file=sys.stderr)
        return 2
    total = len(entries) * args.repeat
    print(
        f"{len(entries)} scenarios x {args.repeat} run(s) = {total} runs",
        flush=True,
    )

    results: dict[str, list[dict]] = {e["name"]: [] for e in entries}
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with (
        tempfile.TemporaryDirectory(prefix="dldoctor-accuracy-") as tmp,
        Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=console,
            transient=True,
        ) as progress,
    ):
        task = progress.add_task("runs", total=total)
        for rep in range(args.repeat):
            for e in entries:
                progress.update(task, description=f"{e['name']} #{rep + 1}")
                res = run_one(e, tmp)
                results[e["name"]].append(res)
                detail = res.get("reason") or (
                    f"verdict {res['verdict']}, loud [{', '.join(res['loud'])}]"
                )
                progress.console.print(
                    f"{e['name']} #{rep + 1}: {res['outcome']} ({detail}; {res['seconds']:.1f} s)",
                    markup=False,
                    highlight=False,
                )
                progress.advance(task)

    # Per scenario: expected against what came out.
    rows = [["scenario", "expected", "ok", "named at", "verdicts", "warning/critical findings"]]
    for e in entries:
        rs = results[e["name"]]
        ran = [r for r in rs if r["outcome"] != "skipped"]
        ok = sum(r["outcome"] == "ok" for r in ran)
        named = sorted(r["notice_s"] for r in ran if r.get("notice_s") is not None)
        rows.append(
            [
                e["name"],
                e["expect"] + (f" ({e['severity']})" if e.get("severity") else ""),
                f"{ok}/{len(ran)}" if ran else "skipped",
                f"{statistics.median(named):.1f} s" if named else "-",
                counts(r["verdict"] or "no report" for r in ran),
                counts(i for r in ran for i in sorted(set(r["loud"]))),
            ]
        )
    print()
    print(table(rows))

    # Confusion: expected label x verdict.
    labels = sorted({e["expect"] if not catalog.is_twin(e) else "healthy twin" for e in entries})
    verdicts = sorted(
        {
            r["verdict"] or "no report"
            for rs in results.values()
            for r in rs
            if r["outcome"] != "skipped"
        }
    )
    grid = collections.Counter()
    for e in entries:
        label = e["expect"] if not catalog.is_twin(e) else "healthy twin"
        for r in results[e["name"]]:
            if r["outcome"] != "skipped":
                grid[(label, r["verdict"] or "no report")] += 1
    print()
    print("expected \\ verdict")
    print(
        table(
            [["", *verdicts]]
            + [[lab, *(str(grid[(lab, v)] or ".") for v in verdicts)] for lab in labels]
        )
    )

    faults = [
        r
        for e in entries
        if not catalog.is_twin(e)
        for r in results[e["name"]]
        if r["outcome"] != "skipped"
    ]
    twins = [
        r
        for e in entries
        if catalog.is_twin(e)
        for r in results[e["name"]]
        if r["outcome"] != "skipped"
    ]
    found = sum(r["outcome"] == "ok" for r in faults)
    fps = sum(r["outcome"] == "false_positive" for r in twins)
    skipped = [
        f"{name} ({rs[0].get('reason')})"
        for name, rs in results.items()
        if rs and all(r["outcome"] == "skipped" for r in rs)
    ]
    print()
    if faults:
        print(
            f"expected finding found: {found}/{len(faults)} runs ({100 * found / len(faults):.0f}%)"
        )
    if twins:
        print(
            f"false positives on healthy twins: {fps}/{len(twins)} runs "
            f"({100 * fps / len(twins):.0f}%)"
        )
    if skipped:
        print("skipped: " + "; ".join(skipped))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"repeat": args.repeat, "results": results}, f, indent=1)
    bad = len(faults) - found + fps
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
