"""The committed type stub of the extension matches what the extension exports."""

import subprocess
import sys
from pathlib import Path

import pytest

STUB = Path(__file__).resolve().parents[1] / "src" / "dldoctor" / "_ext.pyi"


def test_stub_is_up_to_date(tmp_path):
    pytest.importorskip("nanobind.stubgen")
    out = tmp_path / "_ext.pyi"
    subprocess.run(
        [sys.executable, "-m", "nanobind.stubgen", "-q", "-m", "dldoctor._ext", "-o", str(out)],
        check=True,
    )
    assert out.read_text() == STUB.read_text(), "run tools/stubgen and commit src/dldoctor/_ext.pyi"
