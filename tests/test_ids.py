"""Every finding id has its parts: a rule file, a C++ test, and a scenario that produces it
(or the stated reason it cannot be made here); and the README's table, DESIGN's list and the
ids the C++ analyzer can emit agree."""

from __future__ import annotations

import os
import re

import pytest

from doctor_run import catalog

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = os.path.join(ROOT, "src", "dldoctor_core")
RULES = os.path.join(CORE, "analyze", "rules")
CPP_TESTS = os.path.join(ROOT, "tests", "cpp", "rules")
# DESIGN.md lives beside the repository in the project's shared folder, or in the tree.
DESIGN_PATHS = [
    os.path.join(ROOT, "DESIGN.md"),
    os.path.join(ROOT, "docs", "DESIGN.md"),
    os.path.join(os.path.dirname(ROOT), "shared", "DESIGN.md"),
    "/work/shared/DESIGN.md",
]

# Ids DESIGN.md already names whose finding is still to be built: not in the README's table,
# not emitted, and the issue that adds them.
PLANNED: dict[str, str] = {}

# Ids this project added to DESIGN's vocabulary, and why. DESIGN.md is the shared contract, kept
# outside the repository and read-only to us; an id added beyond it lives in the README's table
# (the users' reference), in docs/architecture.md, and here.
EXTENSIONS: dict[str, str] = {
    "slow_handover": "issue 9: a loader whose workers keep up, but handing each batch over to "
    "the main process (one round trip per tensor under file_descriptor) stalls the loop",
    "uneven_worker_split": "stop 45: an IterableDataset (webdataset, Hugging Face datasets, an "
    "__iter__ split by get_worker_info()) whose shards leave workers without data while the "
    "loop stalls; the fetch rules' 'more workers' would idle too",
}


def table_ids(text: str) -> list[str]:
    """The ids in the first column of the markdown table rows of `text`, in order."""
    ids = []
    for line in text.splitlines():
        if line.startswith("| `"):
            ids += re.findall(r"`([a-z_]+)`", line.split("|")[1])
    return ids


def section(text: str, start: str, end: str) -> str:
    i = text.index(start)
    j = text.find(end, i + len(start))
    return text[i : j if j >= 0 else None]


def readme_ids() -> list[str]:
    with open(os.path.join(ROOT, "README.md")) as f:
        return table_ids(section(f.read(), "## What it finds", "\n### "))


def emitted_ids() -> set[str]:
    """Ids the C++ core assigns to a finding: `make_finding("...", ...)` in the rules, `f.id =
    "..."`, or an id constant (`kId = "..."`), until the binding lists them itself."""
    pattern = re.compile(r'\b(?:(?:id|kId\w*)\s*(?:\[\])?\s*=\s*|make_finding\(\s*)"([a-z_]+)"')
    found = set()
    for folder, _, files in os.walk(CORE):
        for name in files:
            if name.endswith((".cpp", ".hpp")):
                with open(os.path.join(folder, name)) as f:
                    found.update(pattern.findall(f.read()))
    return found


IDS = readme_ids()


def test_readme_table_is_read():
    assert len(IDS) >= 18 and len(set(IDS)) == len(IDS), IDS
    assert "slow_getitem" in IDS and "cuda_oom_risk" in IDS


def test_readme_table_is_what_the_analyzer_can_emit():
    emitted = emitted_ids()
    assert emitted, "no finding id found in the C++ sources (has the way ids are set changed?)"
    assert set(IDS) == emitted, {
        "in the README, never emitted": sorted(set(IDS) - emitted),
        "emitted, not in the README": sorted(emitted - set(IDS)),
    }


def test_design_lists_the_readme_ids_and_the_planned_ones():
    path = next((p for p in DESIGN_PATHS if os.path.exists(p)), None)
    if path is None:
        pytest.skip("DESIGN.md is not in this checkout nor beside it")
    with open(path) as f:
        design = table_ids(section(f.read(), "## 4. Findings", "\n## 5."))
    assert len(set(design)) == len(design), design
    assert set(design) | set(EXTENSIONS) == set(IDS) | set(PLANNED), {
        "in DESIGN only": sorted(set(design) - set(IDS) - set(PLANNED)),
        "in the README only, not an extension": sorted(set(IDS) - set(design) - set(EXTENSIONS)),
        "planned, not in DESIGN": sorted(set(PLANNED) - set(design)),
        "an extension the README lacks": sorted(set(EXTENSIONS) - set(IDS)),
    }
    assert not set(PLANNED) & (set(IDS) | emitted_ids()), "built: move it out of PLANNED"
    assert not set(EXTENSIONS) & set(design), "DESIGN lists it now: move it out of EXTENSIONS"


def test_extensions_are_in_the_architecture_page():
    with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
        page = f.read()
    missing = [fid for fid in EXTENSIONS if f"`{fid}`" not in page]
    assert not missing, missing


@pytest.mark.parametrize("fid", IDS)
def test_rule_file(fid):
    assert os.path.exists(os.path.join(RULES, f"{fid}.cpp")), f"no analyze/rules/{fid}.cpp"


@pytest.mark.parametrize("fid", IDS)
def test_cpp_rule_test(fid):
    assert os.path.exists(os.path.join(CPP_TESTS, f"{fid}_test.cpp")), (
        f"no tests/cpp/rules/{fid}_test.cpp"
    )


@pytest.mark.parametrize("fid", IDS)
def test_scenario_or_stated_reason(fid):
    expecting = [e["name"] for e in catalog.SCENARIOS if e["expect"] == fid]
    assert expecting or catalog.NO_SCENARIO.get(fid), (
        f"no scenario in tests/scenarios/catalog.py expects {fid}, and NO_SCENARIO says not why"
    )


def test_catalog_speaks_of_known_ids_only():
    for fid in catalog.NO_SCENARIO:
        assert fid in IDS, fid
    for e in catalog.SCENARIOS:
        named = catalog.absent_id(e) or e["expect"]
        assert named == "healthy" or named in IDS, e["name"]
        for fid in [*e.get("checks", {}).get("findings", {}), *e.get("known_false_positives", {})]:
            assert fid in IDS, (e["name"], fid)


def test_every_diagnosis_has_a_healthy_twin():
    """A scenario that must produce a finding has a twin, a variant of the same script, that
    must not."""
    twins = {e["script"] for e in catalog.SCENARIOS if catalog.is_twin(e)}
    lonely = [e["name"] for e in catalog.SCENARIOS if e["script"] not in twins]
    assert not lonely, lonely
