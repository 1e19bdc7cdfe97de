"""Fixtures the job-hook tests share, and which tests may run beside which.

tools/test runs the suite in three phases (pytest-xdist, a test module's tests in one
process: they share module fixtures and cached runs; the catalog's runs, which share
nothing, each on their own), by the marks set here:
  - unmarked: no real bottleneck and nothing timed: two modules at a time;
  - `waits`: a real job that mostly waits (a sleep, I/O, a hang, a fault): three modules at
    a time, never beside a CPU-heavy test (every `scenario` test but those below);
  - `alone`: a run that needs the machine to itself (catalog.runs_alone, or the mark): one
    at a time, with nothing beside it.
"""

from __future__ import annotations

import pytest


def pytest_configure(config):
    config.addinivalue_line("markers", "alone: runs with no other test beside it (tools/test)")
    config.addinivalue_line("markers", "waits: a real job that mostly waits (tools/test)")


def pytest_collection_modifyitems(config, items):
    from doctor_run import catalog

    for item in items:
        entry = getattr(getattr(item, "callspec", None), "params", {}).get("entry")
        if isinstance(entry, dict) and catalog.runs_alone(entry):
            item.add_marker(pytest.mark.alone)
        if item.get_closest_marker("scenario") and not item.get_closest_marker("alone"):
            item.add_marker(pytest.mark.waits)


# A catalog run shares nothing with the others in its module: each is a unit of its own for
# xdist, so the `waits` phase spreads them over its processes. Every other module stays one
# unit (its module fixtures and cached runs are made once).
SPREAD = "test_scenarios.py::test_scenario["


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class ScenariosSpread(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return nodeid if SPREAD in nodeid else super()._split_scope(nodeid)

    return ScenariosSpread(config, log)


@pytest.fixture()
def in_process(tmp_path):
    """The hooks installed in this test process, writing to a fresh ring (yielded)."""
    from dldoctor import _ext
    from dldoctor.job import hooks

    ring = _ext.EventRing.create(str(tmp_path / "events.ring"), 1 << 16)
    assert hooks.install(ring.path, str(tmp_path))
    yield ring
    hooks.uninstall()
    ring.close()
