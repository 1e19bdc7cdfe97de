"""Installing dldoctor. The wheel that `pip wheel .` makes installs into a fresh venv and works
there with no compiler, CMake or build backend anywhere: `dldoctor check`, and a real scenario
job under `dldoctor run` with its JSON and HTML reports (plotly comes with a plain install, torch
does not). tools/install leaves an active venv without torch alone, and names missing Debian
packages with the exact apt-get line."""

from __future__ import annotations

import email.parser
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from doctor_run import SCENARIOS

try:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
except ImportError:  # pip carries its own copy
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name

REPO = Path(__file__).resolve().parent.parent
# What building needs and running must not: none of it may be on the venv's PATH or importable.
BUILD_COMMANDS = ("cc", "gcc", "g++", "c++", "clang", "clang++", "cmake", "ninja", "make")
BUILD_MODULES = ("cmake", "ninja", "nanobind", "scikit_build_core")


def run(cmd, **kw) -> subprocess.CompletedProcess:
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("timeout", 300)
    return subprocess.run([str(c) for c in cmd], stdin=subprocess.DEVNULL, **kw)


def wheel_requirements(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        meta = email.parser.Parser().parsestr(z.read(name).decode())
    return meta.get_all("Requires-Dist") or []


def link_distributions(dest: Path, roots: list[str]) -> list[str]:
    """Links, in `dest`, to this interpreter's installed distributions `roots` and all they
    require (markers evaluated here): a folder another venv can see them in through a .pth,
    with nothing downloaded or built. Returns the names linked."""
    dest.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        req = Requirement(todo.pop())
        if req.marker is not None and not req.marker.evaluate({"extra": ""}):
            continue
        name = canonicalize_name(req.name)
        if name in seen:
            continue
        seen.add(name)
        dist = importlib.metadata.distribution(req.name)
        tops = {f.parts[0] for f in dist.files or () if f.parts[0] != ".."}
        for top in sorted(tops - {"__pycache__"}):
            if not top.endswith(".pth") and not (dest / top).exists():
                (dest / top).symlink_to(dist.locate_file(top))
        todo += dist.requires or []
    return sorted(seen)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    # The build tools of this interpreter's environment and its CMake build (tools/test says
    # which), so that only what changed is compiled: an isolated build would compile the whole
    # core again.
    build_dir = os.environ.get("DLDOCTOR_BUILD_DIR", "build/py")
    r = run(
        [sys.executable, "-m", "pip", "wheel", ".", "-w", out, "--no-deps", "-q"]
        + ["--no-build-isolation", f"--config-settings=build-dir={build_dir}"],
        cwd=REPO,
        timeout=900,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    (whl,) = out.glob("dldoctor-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory):
    """A fresh venv with the wheel installed by its own pip, PATH = its bin/ alone."""
    root = tmp_path_factory.mktemp("fresh")
    env_dir = root / "venv"
    r = run([sys.executable, "-m", "venv", env_dir])
    assert r.returncode == 0, r.stderr
    py = env_dir / "bin" / "python"
    # torch (for the job) and the wheel's own requirements, from this interpreter's environment.
    shared = link_distributions(root / "shared", ["torch", *wheel_requirements(wheel)])
    purelib = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    Path(purelib.stdout.strip(), "_shared.pth").write_text(f"{root / 'shared'}\n")
    env = {
        "PATH": str(env_dir / "bin"),
        "HOME": str(root),
        "LANG": "C.UTF-8",
        "PIP_CONFIG_FILE": os.devnull,  # no index, no find-links, no constraints from this machine
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
    }
    found = [c for c in BUILD_COMMANDS if shutil.which(c, path=env["PATH"])]
    assert not found, f"build tools on the venv's PATH: {found}"
    r = run(
        [
            py,
            "-c",
            f"import importlib.util as u; print([m for m in {BUILD_MODULES!r} if u.find_spec(m)])",
        ],
        env=env,
    )
    assert r.stdout.strip() == "[]", r.stdout + r.stderr
    # Its requirements are already there, so --no-index: nothing may be fetched, or built.
    r = run([py, "-m", "pip", "install", "--no-index", "--only-binary=:all:", wheel], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    return env_dir, env, shared


def test_wheel_requires_plotly_and_not_torch(wheel):
    reqs = [Requirement(r) for r in wheel_requirements(wheel)]
    plain = {canonicalize_name(r.name) for r in reqs if r.marker is None}
    assert {"rich", "plotly"} <= plain, plain
    assert not [str(r) for r in reqs if canonicalize_name(r.name).startswith("torch")]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert any(n.startswith("dldoctor/_ext.") and n.endswith(".so") for n in names), names
    assert not [n for n in names if n.endswith((".cpp", ".hpp"))]


def test_installed_wheel_is_what_runs(venv):
    env_dir, env, shared = venv
    assert "torch" in shared and "plotly" in shared and "dldoctor" not in shared
    r = run(
        [
            env_dir / "bin" / "python",
            "-c",
            "import dldoctor, dldoctor._ext as e; print(dldoctor.__file__); print(e.__file__)",
        ],
        env=env,
        cwd=env_dir,
    )
    assert r.returncode == 0, r.stderr
    for path in r.stdout.split():
        assert Path(path).resolve().is_relative_to(env_dir.resolve()), r.stdout


def test_check_runs_from_the_wheel(venv):
    env_dir, env, _ = venv
    r = run([env_dir / "bin" / "dldoctor", "check", "--json", "-"], env=env, cwd=env_dir)
    assert r.returncode in (0, 1), r.stderr
    assert "Traceback" not in r.stderr, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema"] == 1
    assert {c["id"] for c in doc["checks"]} >= {"cpu_usable", "shm_size", "fd_limit"}


def test_scenario_diagnosed_from_the_wheel(venv, tmp_path):
    """A worker that exits with code 3: the installed dldoctor instruments the job (its
    sitecustomize comes from the wheel), names the worker and its last words, writes both
    reports, and exits with the job's own code."""
    env_dir, env, _ = venv
    report, html = tmp_path / "report.json", tmp_path / "report.html"
    r = run(
        [env_dir / "bin" / "dldoctor", "run", "-q", "--json", report, "--html", html, "--"]
        + [env_dir / "bin" / "python", Path(SCENARIOS, "worker_died.py"), "--cause", "exit", "--seconds", "5"],
        env=env,
        cwd=tmp_path,
        timeout=180,
    )
    assert r.returncode == 1, r.stderr
    doc = json.loads(report.read_text())
    assert doc["verdict"] == "worker_died", doc["findings"]
    ev = next(f for f in doc["findings"] if f["id"] == "worker_died")["evidence"]
    assert ev["exit_code"] == 3 and ev["worker"] == 1
    assert "is corrupt" in ev["stderr_tail"]
    page = html.read_text()
    assert "worker_died" in page and "Plotly.newPlot" in page


# --- tools/install ----------------------------------------------------------------------------


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_active_venv_without_torch_is_refused_and_untouched(tmp_path):
    env_dir = tmp_path / "venv"
    r = run([sys.executable, "-m", "venv", "--without-pip", env_dir])
    assert r.returncode == 0, r.stderr
    before = tree(env_dir)
    env = {**os.environ, "VIRTUAL_ENV": str(env_dir)}
    env["PATH"] = f"{env_dir / 'bin'}:{env['PATH']}"
    r = run(["bash", REPO / "tools" / "install", "--demo"], env=env, cwd=tmp_path)
    assert r.returncode == 1, r.stdout + r.stderr
    assert r.stderr.startswith(f"dldoctor: no torch in the active environment {env_dir}")
    assert len(r.stderr.splitlines()) == 1 and r.stdout == "", r.stdout + r.stderr
    assert tree(env_dir) == before


def test_missing_debian_packages_are_named_with_the_apt_line():
    """As a user who is not root, on a machine without python3 or a compiler (PYTHON and CXX
    name ones that do not exist): the exact command, and nothing done."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root (to run tools/install as nobody) and setpriv")
    # A copy of tools/ alone (no .venv beside it), where the user nobody can read it.
    clone = Path(tempfile.mkdtemp(prefix="dldoctor-install-"))
    try:
        shutil.copytree(REPO / "tools", clone / "tools")
        clone.chmod(0o755)
        env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"}
        env.update(HOME="/", CXX="no-such-c++", PYTHON="/no/such/python3")
        r = run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            + ["bash", clone / "tools" / "install", "--demo"],
            env=env,
            cwd="/",
        )
        assert r.returncode == 1, r.stdout + r.stderr
        assert r.stdout == "" and r.stderr == (
            "dldoctor: missing Debian packages; install them with: "
            "sudo apt-get install -y python3 python3-venv python3-dev g++\n"
        )
        assert sorted(os.listdir(clone)) == ["tools"]
    finally:
        shutil.rmtree(clone)
