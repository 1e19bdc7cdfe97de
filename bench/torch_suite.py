"""PyTorch's own DataLoader tests, run with and without `dldoctor run` (issue 15: the outcomes,
test by test, must be the same: dldoctor may not change what a loader yields, in what order,
or which exceptions it raises):

    python bench/torch_suite.py PATH/test_dataloader.py [--rounds 3] [-k EXPR]

PATH/test_dataloader.py is PyTorch's `test/test_dataloader.py` from a checkout of the torch
you run (it is not shipped in the wheel; it needs `pip install expecttest psutil`). Each
round runs the file under pytest twice, plainly and under `dldoctor run --json F --`, in an
order that alternates between rounds, and reads both JUnit files. Printed: each run's counts
(passed, failed, skipped), its warnings and its "Exception ignored" lines on stderr, and every
test whose outcome differs between the two sides. A test whose outcome differs between two
plain runs is flaky on this machine and is listed apart: it says nothing of dldoctor.
Exit status 1 when a test's outcome differs with dldoctor in a way the plain runs never show.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter


def outcomes(junit: str) -> dict[str, str]:
    """test id -> passed | failed | error | skipped, from a pytest JUnit file."""
    out: dict[str, str] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        tid = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        if "error" in kinds:
            out[tid] = "error"
        elif "failure" in kinds:
            out[tid] = "failed"
        elif "skipped" in kinds:
            out[tid] = "skipped"
        else:
            out[tid] = "passed"
    return out


def run_once(path: str, watched: bool, tmp: str, tag: str, k: str | None) -> dict:
    junit = os.path.join(tmp, f"{tag}.xml")
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml", junit]
    cmd += ["-k", k] if k else []
    cmd.append(os.path.basename(path))
    if watched:
        cmd = [
            sys.executable,
            "-m",
            "dldoctor",
            "run",
            "--json",
            os.path.join(tmp, f"{tag}.json"),
            "--",
            *cmd,
        ]
    t0 = time.monotonic()
    r = subprocess.run(
        cmd,
        cwd=os.path.dirname(os.path.abspath(path)),
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    wall = time.monotonic() - t0
    m = re.search(r"(\d+) warnings?", r.stdout.splitlines()[-1] if r.stdout else "")
    return {
        "outcomes": outcomes(junit) if os.path.exists(junit) else {},
        "warnings": int(m.group(1)) if m else 0,
        "ignored": r.stderr.count("Exception ignored"),
        "wall": wall,
        "rc": r.returncode,
    }


def counts(o: dict[str, str]) -> str:
    c = Counter(o.values())
    return " ".join(f"{c[k]} {k}" for k in ("passed", "failed", "error", "skipped") if c[k])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("tests", help="PyTorch's test/test_dataloader.py")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-k", help="only the tests pytest -k selects")
    args = ap.parse_args()
    plain, watched = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.rounds):
            order = (False, True) if i % 2 == 0 else (True, False)
            for w in order:
                tag = f"{'with' if w else 'plain'}{i}"
                res = run_once(args.tests, w, tmp, tag, args.k)
                (watched if w else plain).append(res)
                print(
                    f"round {i + 1} {'with dldoctor' if w else 'plain        '}: "
                    f"{counts(res['outcomes'])}; {res['warnings']} warnings; "
                    f"{res['ignored']} 'Exception ignored'; {res['wall']:.0f} s",
                    flush=True,
                )
    every = sorted({t for r in plain + watched for t in r["outcomes"]})
    flaky = {t for t in every if len({r["outcomes"].get(t) for r in plain}) > 1}
    differ = []
    for t in every:
        if t in flaky:
            continue
        seen_plain = {r["outcomes"].get(t) for r in plain}
        seen_with = {r["outcomes"].get(t) for r in watched}
        if seen_with != seen_plain:
            differ.append((t, sorted(map(str, seen_plain)), sorted(map(str, seen_with))))
    print(
        f"\n{len(every)} tests; flaky without dldoctor: {len(flaky)}; "
        f"different with dldoctor: {len(differ)}"
    )
    for t in sorted(flaky):
        print(
            f"  flaky: {t}: {[r['outcomes'].get(t) for r in plain]} plain, "
            f"{[r['outcomes'].get(t) for r in watched]} with"
        )
    for t, a, b in differ:
        print(f"  DIFFERENT: {t}: plain {a}, with dldoctor {b}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
