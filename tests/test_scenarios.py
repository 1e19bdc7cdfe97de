"""Every scenario of tests/scenarios/catalog.py: a real job with a real bottleneck (or its
healthy twin) under `dldoctor run`, with the real fault it needs; the finding it must
produce (or the silence it must keep) and the entry's checks on the report."""

from __future__ import annotations

import os

import pytest

from doctor_run import DoctorRun, catalog, run_entry

pytestmark = pytest.mark.scenario
SEVERITY = {"info": 0, "warning": 1, "critical": 2}


@pytest.mark.parametrize("entry", catalog.SCENARIOS, ids=lambda e: e["name"])
def test_scenario(entry, tmp_path):
    r = run_entry(entry, tmp_path)
    checks = entry.get("checks", {})
    assert r.returncode == checks.get("returncode", 0), r.stderr
    assert r.report is not None, f"no report\n{r.stderr}"
    if catalog.is_twin(entry):
        absent = catalog.absent_id(entry)
        if absent:
            assert absent not in r.ids(), r.report["findings"]
        known = entry.get("known_false_positives", {})
        assert [i for i in r.loud() if i not in known] == [], r.report["findings"]
        if r.loud():
            check_run(r, checks, entry["expect"])
            pytest.xfail("known false positive: " + "; ".join(f"{i}: {known[i]}" for i in r.loud()))
    else:
        f = r.finding(entry["expect"])
        least = entry.get("severity", "warning")
        assert SEVERITY[f["severity"]] >= SEVERITY[least], f
    check_run(r, checks, entry["expect"])


def test_every_script_has_a_scenario():
    """No scenario script outside the catalog, none missing: the catalog is the only list."""
    scripts = {n[:-3] for n in os.listdir(catalog.HERE) if n.endswith(".py") and n[0] != "_"}
    scripts.discard("catalog")
    assert scripts == {e["script"] for e in catalog.SCENARIOS}
    assert len({e["name"] for e in catalog.SCENARIOS}) == len(catalog.SCENARIOS)


# --- the checks of an entry ----------------------------------------------------------------------


def check_run(r: DoctorRun, checks: dict, expect: str = "") -> None:
    report = r.report
    if checks.get("notice"):  # named while the job ran, not only at its end
        assert r.notice_s(expect) is not None, r.stderr
    if "verdict" in checks:
        assert report["verdict"] == checks["verdict"], report["findings"]
    if "ids" in checks:
        assert r.ids() == checks["ids"], report["findings"]
    for fid in checks.get("absent", ()):
        assert fid not in r.ids(), report["findings"]
    for path, cond in checks.get("report", {}).items():
        check(f"report {path}", lookup(report, path), cond)
    if "stderr" in checks:
        check("stderr", r.stderr, checks["stderr"])
    if "wall_s" in checks:
        check("wall time (s)", r.seconds, checks["wall_s"])
    for fid, spec in checks.get("findings", {}).items():
        check_finding(r.finding(fid), spec)


def check_finding(f: dict, spec: dict) -> None:
    ev = f["evidence"]
    for key, cond in spec.items():
        if key == "evidence":
            for name, c in cond.items():
                check(f"{f['id']} evidence {name}", ev.get(name, MISSING), c, f)
        elif key == "relations":
            for rel in cond:
                a, op, b, factor = (*rel, 1)[:4]
                assert a in ev and b in ev, (rel, ev)
                assert compare(ev[a], op, factor * ev[b]), (f"{a} {op} {factor} x {b}", ev)
        else:  # a finding field, or several joined by "|"
            text = " ".join(str(lookup(f, part)) for part in key.split("|"))
            check(f"{f['id']} {key}", text, cond, f)


class _Missing:
    def __repr__(self) -> str:
        return "<missing>"


MISSING = _Missing()


def lookup(obj, path: str):
    """obj["a"]["b"][0] for "a.b.0"; MISSING where a step does not exist."""
    for part in path.split("."):
        if isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        elif isinstance(obj, dict) and part in obj:
            obj = obj[part]
        else:
            return MISSING
    return obj


def compare(value, op: str, ref) -> bool:
    return {">": value > ref, ">=": value >= ref, "<": value < ref, "<=": value <= ref}[op]


def check(what: str, value, cond, context=None) -> None:
    """`value` meets `cond` (see catalog.py: a value, or a dict of tests)."""
    ctx = context if context is not None else value
    if not isinstance(cond, dict):
        assert value == cond, (what, value, ctx)
        return
    for op, ref in cond.items():
        if op == "present":
            assert (value is not MISSING) == ref, (what, value, ctx)
            continue
        assert value is not MISSING, (f"{what} is missing", ctx)
        if op in (">", ">=", "<", "<="):
            assert isinstance(value, (int, float)) and compare(value, op, ref), (
                f"{what} {op} {ref}",
                value,
                ctx,
            )
        elif op in ("contains", "lacks"):
            for part in [ref] if isinstance(ref, str) else ref:
                assert (part in str(value)) == (op == "contains"), (f"{what} {op} {part!r}", ctx)
        elif op == "startswith":
            assert str(value).startswith(ref), (f"{what} startswith {ref!r}", value, ctx)
        elif op == "nonempty":
            assert bool(value) == ref, (f"{what} nonempty", value)
        elif op == "len":
            assert len(value) == ref, (f"{what} has {ref}", value)
        else:
            raise AssertionError(f"unknown condition {op!r} for {what}")


def test_checks_fail_where_the_run_differs():
    """The checker itself: each kind of check passes on a run that meets it and fails on
    one that does not (a check that cannot fail would prove nothing)."""
    finding = {
        "id": "x",
        "severity": "warning",
        "title": "t",
        "fix": "set a=1",
        "why": "because",
        "evidence": {"n": 3, "m": 40, "s": "abc"},
    }
    report = {"verdict": "healthy", "findings": [finding], "loaders": [{"batches": 9}]}
    stderr = "the stderr\ndldoctor: [3.2 s] x: a title\n"
    r = DoctorRun(0, "", stderr, report, seconds=4.0)
    good = {
        "verdict": "healthy",
        "ids": ["x"],
        "absent": ["y"],
        "report": {"loaders.0.batches": {">": 8, "<=": 9}, "hang": {"present": False}},
        "stderr": {"contains": "stderr"},
        "wall_s": {"<": 5},
        "notice": True,
        "findings": {
            "x": {
                "severity": "warning",
                "evidence": {
                    "n": 3,
                    "s": {"startswith": "ab", "lacks": "z"},
                    "q": {"present": False},
                },
                "relations": [("m", ">", "n", 10)],
                "fix|why": {"contains": ["a=1", "because"]},
            }
        },
    }
    check_run(r, good, "x")
    assert r.notice_s("x") == 3.2 and r.notice_s("y") is None
    bad = [
        {"verdict": "x"},
        {"ids": []},
        {"absent": ["x"]},
        {"report": {"loaders.0.batches": {">": 9}}},
        {"report": {"loaders.1.batches": {"<": 100}}},
        {"report": {"hang": {"present": True}}},
        {"stderr": {"contains": "traceback"}},
        {"wall_s": {"<": 4}},
        {"findings": {"y": {}}},
        {"findings": {"x": {"severity": "critical"}}},
        {"findings": {"x": {"evidence": {"n": 4}}}},
        {"findings": {"x": {"evidence": {"absent_key": {">=": 0}}}}},
        {"findings": {"x": {"evidence": {"s": {"lacks": "b"}}}}},
        {"findings": {"x": {"relations": [("m", ">", "n", 20)]}}},
        {"findings": {"x": {"fix": {"contains": "because"}}}},
    ]
    for checks in bad:
        with pytest.raises(AssertionError):
            check_run(r, checks, "x")
    with pytest.raises(AssertionError):
        check_run(r, {"notice": True}, "y")
