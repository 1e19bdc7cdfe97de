"""Fixtures the job-hook tests share."""

from __future__ import annotations

import pytest


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
