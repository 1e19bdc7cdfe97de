"""The HTML report (`run --html`, `report F.json --html`): one self-contained file that
opens in headless Chromium with no console error and no request beyond itself, shows the
verdict and every finding, and has data in every chart; after a hang, the stuck worker's
stack. Set DLDOCTOR_UPDATE_DOCS=1 to refresh the README's screenshot (docs/html_report.png).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from _chromium import Chromium, chromium_path
from dldoctor.reporters.evidence import grouped, short_paths
from doctor_run import run_doctor, scenario

# Its report is a slow_getitem run's, named from the workers' CPU time: nothing beside it.
pytestmark = [pytest.mark.scenario, pytest.mark.alone]
pytest.importorskip("plotly", reason="the HTML report needs plotly (pip install 'dldoctor[html]')")
needs_chromium = pytest.mark.skipif(
    chromium_path() is None, reason="no chromium (tools/install installs Debian's chromium)"
)
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS_PNG = os.path.join(REPO, "docs", "html_report.png")

# Charts every run of a real loader has (ids set by reporters/html.py).
CORE_CHARTS = {
    "chart-batches",
    "chart-stall",
    "chart-cpu",
    "chart-state",
    "chart-getitem-dist",
    "chart-collate-dist",
}

CHART_DATA_JS = """
Array.from(document.querySelectorAll('.js-plotly-plot')).map(gd => ({
  id: gd.id,
  traces: (gd.data || []).length,
  points: (gd.data || []).reduce((n, tr) => n + [].concat(tr.y || [], ...(tr.z || []))
      .filter(v => v !== null && v !== undefined && !Number.isNaN(v)).length, 0),
  drawn: gd.querySelectorAll('.main-svg').length,
}))
"""


@pytest.fixture(scope="module")
def slow_getitem_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("html")
    page = str(tmp / "report.html")
    r = run_doctor(scenario("slow_getitem", "--seconds", "5"), tmp, ("--html", page))
    assert r.returncode == 0, r.stderr
    assert r.report["verdict"] == "slow_getitem", r.stderr
    return r, page, tmp


def _check_page(chrome: Chromium, page: str, report: dict) -> list[dict]:
    mark = len(chrome.events)
    url = "file://" + page
    chrome.open(url)
    charts = chrome.evaluate(CHART_DATA_JS)
    new = Chromium.__new__(Chromium)  # the checks below read only this page's events
    new.events = chrome.events[mark:]
    assert new.console_errors() == []
    others = [u for u in new.requests() if u != url and not u.startswith(("data:", "about:"))]
    assert others == [], f"the page fetched {others}"

    text = chrome.evaluate("document.body.innerText")
    assert f"verdict: {report['verdict']}" in text
    for f in report["findings"]:
        assert chrome.evaluate(f"!!document.getElementById('finding-{f['id']}')"), f["id"]
        # Paths as the page shows them: relative to where dldoctor ran (this cwd).
        assert short_paths(f["title"]) in text
        if f.get("fix"):
            assert short_paths(f["fix"]) in text
        for _group, entries in grouped(f.get("evidence") or {}):
            for label, value in entries:
                assert value in text, (f["id"], label, value)
    ids = {c["id"] for c in charts}
    assert CORE_CHARTS <= ids, f"missing charts: {CORE_CHARTS - ids}"
    for c in charts:
        assert c["traces"] > 0 and c["points"] > 0, f"{c['id']} has no data"
        assert c["drawn"] > 0, f"{c['id']} was not drawn"
    return charts


@needs_chromium
def test_html_opens_offline_with_verdict_findings_and_charts(slow_getitem_run):
    r, page, tmp = slow_getitem_run
    with open(page, encoding="utf-8") as f:
        html = f.read()
    assert "<script src=" not in html and "<link " not in html  # everything inlined

    # The JSON keeps what the page needs: `report --html` draws the same charts later.
    again = str(tmp / "again.html")
    json_path = str(tmp / "report.json")
    with open(json_path, "w") as f:
        import json

        json.dump(r.report, f)
    p = subprocess.run(
        [sys.executable, "-m", "dldoctor", "report", json_path, "--html", again],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr

    with Chromium() as chrome:
        first = _check_page(chrome, page, r.report)
        second = _check_page(chrome, again, r.report)
        assert {c["id"] for c in first} == {c["id"] for c in second}
        if os.environ.get("DLDOCTOR_UPDATE_DOCS"):
            chrome.open("file://" + page)
            os.makedirs(os.path.dirname(DOCS_PNG), exist_ok=True)
            chrome.screenshot(DOCS_PNG, max_height=2700)  # the verdict, findings, loop and workers


CHART_SCALES_JS = """
(() => {
  const shm = document.getElementById('chart-shm');
  const loop = document.getElementById('chart-batches');
  const stall = document.getElementById('chart-stall');
  const notes = gd => (gd.layout.annotations || []).map(a => a.text);
  return {
    shm_range: shm._fullLayout.yaxis.range,
    shm_traces: shm.data.map(t => t.name),
    shm_used: shm.data[0].y.filter(v => v !== null),
    shm_title: shm.layout.title.text,
    loop_notes: notes(loop), stall_notes: notes(stall),
    loop_shapes: (loop.layout.shapes || []).map(s => [s.x0, s.x1]),
  };
})()
"""


@needs_chromium
def test_shm_use_is_visible_and_the_start_is_marked(slow_getitem_run):
    # Issue 10: the /dev/shm used line lay flat against a 24 GiB axis, and the seconds
    # before the first batch were blank without a word.
    r, page, _ = slow_getitem_run
    with Chromium() as chrome:
        chrome.open("file://" + page)
        got = chrome.evaluate(CHART_SCALES_JS)
    total_mib = (
        r.report["series"]["machine"].get("shm_total_bytes")
        or r.report["system"]["shm_total_bytes"]
    )
    total_mib /= 2**20
    peak = max(got["shm_used"])
    top = got["shm_range"][1]
    if peak < 0.1 * total_mib:  # a few MiB of a large tmpfs: drawn on their own scale
        assert got["shm_traces"] == ["used"], got
        assert abs(top - max(peak * 1.25, 1.0)) < 1e-6 and top < total_mib / 2, got
        assert "on its own scale (size " in got["shm_title"], got
    else:
        assert got["shm_traces"] == ["used", "size"] and top >= total_mib, got
    # The job's start (interpreter, torch import, workers spawning) is shaded and said.
    first = next(
        t
        for i, t in enumerate(r.report["series"]["t_s"])
        if any((ld["batches_per_s"][i] or 0) > 0 for ld in r.report["series"]["loaders"])
    )
    assert first > 0.5, first  # a spawned or forked worker and a JPEG decode take longer
    for notes in (got["loop_notes"], got["stall_notes"]):
        assert any(f"first batch at {first:.1f} s" in n and "starting" in n for n in notes), got
    assert got["loop_shapes"] and got["loop_shapes"][0][1] == first, got


def test_series_in_the_json_report(slow_getitem_run):
    r, _, _ = slow_getitem_run
    s = r.report["series"]
    n = len(s["t_s"])
    assert n >= 4
    assert all(len(ld["batches_per_s"]) == n for ld in s["loaders"])
    workers = [p for p in s["processes"] if p["role"] == "worker"]
    assert len(workers) == 1 and workers[0]["getitem_ms_sample"]
    # The slow worker decodes JPEGs: it is on a CPU most of the time it is sampled.
    states = workers[0]["state"].strip()
    assert states.count("R") > len(states) / 2, states
    assert any(v is not None for v in s["machine"]["mem_available_bytes"])


def test_html_after_a_hang_shows_the_stuck_workers_stack(tmp_path):
    page = str(tmp_path / "hang.html")
    r = run_doctor(
        scenario("worker_hang", "--seconds", "30"),
        tmp_path,
        ("--hang-timeout", "3", "--on-hang", "abort", "--html", page),
    )
    assert r.returncode == 124, r.stderr
    assert r.report["verdict"] == "worker_hang"
    with open(page, encoding="utf-8") as f:
        html = f.read()
    assert "<h2>Hang</h2>" in html
    assert "loader 1 worker 0" in html or "worker 0" in html
    assert "__getitem__" in html and "self.ready.wait()" in html  # the stuck frame's code


def test_report_html_without_series_and_bad_path(tmp_path):
    """An older report (no series) still renders; an unwritable path is one line."""
    import json

    src = tmp_path / "old.json"
    src.write_text(json.dumps({"schema": 1, "verdict": "healthy", "findings": []}))
    out = tmp_path / "old.html"
    p = subprocess.run(
        [sys.executable, "-m", "dldoctor", "report", str(src), "--html", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    assert "verdict: <b>healthy</b>" in out.read_text()
    p = subprocess.run(
        [sys.executable, "-m", "dldoctor", "report", str(src), "--html", "/nonexistent/x.html"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode != 0
    # Refused before anything is written: one line naming the path and why.
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.count("\n") == 1 and "/nonexistent" in p.stderr and "does not exist" in p.stderr
