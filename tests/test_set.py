"""`dldoctor run --set [loaderN.]KEY=VALUE`: DataLoader settings overridden in an unmodified
job, through the DataLoader.__init__ hook. Each override is checked where it acts: the worker
processes in /proc, the loader's own attributes as torch validated them, the thread pools
inside a worker; a bad --set is refused before the job runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from dldoctor.job import settings
from doctor_run import run_doctor

# The job: two loaders (the second a subclass that reaches DataLoader.__init__ through
# super()), each iterated for a few batches; while the first iterates, it counts this
# process's children in /proc (its workers). It prints one JSON line per loader: the
# settings torch kept, the workers seen, and what a worker saw of its thread pools.
JOB = """
import json, os, sys
import torch
from torch.utils.data import DataLoader, Dataset

class Items(Dataset):
    def __len__(self):
        return 48
    def __getitem__(self, i):
        return torch.tensor([i, torch.get_num_threads(), int(os.environ.get("OMP_NUM_THREADS", "0"))])

class MyLoader(DataLoader):
    def __init__(self, dataset, **kw):
        super().__init__(dataset, **kw)

def children():
    pid = os.getpid()
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return len(f.read().split())

def main():
    first = DataLoader(Items(), batch_size=4, num_workers=int(sys.argv[1]), **json.loads(sys.argv[2]))
    second = MyLoader(Items(), batch_size=4, num_workers=1)
    for name, loader in (("first", first), ("second", second)):
        seen = threads = omp = 0
        for i, x in enumerate(loader):
            if i == 3:
                seen = children()
                threads, omp = int(x[0, 1]), int(x[0, 2])
        ctx = loader.multiprocessing_context
        print("RESULT " + json.dumps({
            "loader": name,
            "num_workers": loader.num_workers,
            "prefetch_factor": loader.prefetch_factor,
            "persistent_workers": loader.persistent_workers,
            "pin_memory": loader.pin_memory,
            "in_order": getattr(loader, "in_order", None),
            "batch_size": loader.batch_size,
            "context": None if ctx is None else ctx.get_start_method(),
            "children": seen,
            "worker_threads": threads,
            "worker_omp": omp,
        }), flush=True)

if __name__ == "__main__":  # spawn and forkserver workers import this file
    main()
"""


def job(tmp_path, workers=1, kwargs=None):
    p = tmp_path / "job.py"
    p.write_text(textwrap.dedent(JOB))
    return [sys.executable, str(p), str(workers), json.dumps(kwargs or {})]


def results(r) -> dict:
    out = {}
    for line in r.stdout.splitlines():
        if line.startswith("RESULT "):
            rec = json.loads(line[len("RESULT ") :])
            out[rec["loader"]] = rec
    assert set(out) == {"first", "second"}, r.stdout + r.stderr
    return out


def test_num_workers_takes_effect_in_proc(tmp_path):
    r = run_doctor(job(tmp_path), tmp_path, ["--set", "loader1.num_workers=3"], timeout=240)
    assert r.returncode == 0, r.stderr
    got = results(r)
    assert got["first"]["num_workers"] == 3
    assert got["first"]["children"] == 3  # worker processes of the main process, in /proc
    assert got["second"]["num_workers"] == 1  # loader2 was not named
    assert got["second"]["children"] == 1
    assert r.report["settings_overridden"] == [
        {
            "loader": 1,
            "main_pid": r.report["settings_overridden"][0]["main_pid"],
            "settings": {"num_workers": 3},
            "was": {"num_workers": 1},
            "not_applied": {},
        }
    ]
    assert any("loader 1" in n and "num_workers=3 (was 1)" in n for n in r.report["notes"])


def test_without_set_nothing_changes(tmp_path):
    r = run_doctor(job(tmp_path), tmp_path, timeout=240)
    assert r.returncode == 0, r.stderr
    got = results(r)
    assert got["first"]["children"] == 1 and got["first"]["num_workers"] == 1
    assert "settings_overridden" not in r.report


def test_every_key_takes_effect(tmp_path):
    sets = [
        "num_workers=2",
        "prefetch_factor=3",
        "persistent_workers=true",
        "pin_memory=true",
        "multiprocessing_context=forkserver",
        "in_order=false",
        "worker_threads=2",
        "loader2.batch_size=5",
    ]
    r = run_doctor(job(tmp_path), tmp_path, [a for s in sets for a in ("--set", s)], timeout=300)
    assert r.returncode == 0, r.stderr
    got = results(r)
    for name in ("first", "second"):
        g = got[name]
        assert g["num_workers"] == 2 and g["children"] == 2, g
        assert g["prefetch_factor"] == 3
        assert g["persistent_workers"] is True
        assert g["pin_memory"] is True
        assert g["context"] == "forkserver"
        assert g["in_order"] is False
        assert g["worker_threads"] == 2  # torch.get_num_threads() inside the worker
        assert g["worker_omp"] == 2
    assert got["first"]["batch_size"] == 4
    assert got["second"]["batch_size"] == 5  # only the loader named, through super()
    by_loader = {s["loader"]: s for s in r.report["settings_overridden"]}
    assert by_loader[2]["settings"]["batch_size"] == 5
    assert by_loader[2]["was"]["batch_size"] == 4
    assert "batch_size" not in by_loader[1]["settings"]
    assert by_loader[1]["settings"]["worker_threads"] == 2


def test_num_workers_zero_resolves_what_torch_refuses(tmp_path):
    cmd = job(
        tmp_path,
        workers=2,
        kwargs={
            "prefetch_factor": 4,
            "persistent_workers": True,
            "multiprocessing_context": "spawn",
        },
    )
    r = run_doctor(cmd, tmp_path, ["--set", "loader1.num_workers=0"], timeout=240)
    assert r.returncode == 0, r.stderr
    first = results(r)["first"]
    assert first["num_workers"] == 0 and first["children"] == 0
    assert first["prefetch_factor"] is None and first["persistent_workers"] is False
    assert first["context"] is None
    s = r.report["settings_overridden"][0]
    assert s["settings"] == {
        "num_workers": 0,
        "prefetch_factor": None,
        "persistent_workers": False,
        "multiprocessing_context": None,
    }
    assert s["was"] == {
        "num_workers": 2,
        "prefetch_factor": 4,
        "persistent_workers": True,
        "multiprocessing_context": "spawn",
    }


def test_worker_settings_on_a_loader_without_workers_are_not_applied(tmp_path):
    r = run_doctor(
        job(tmp_path, workers=0),
        tmp_path,
        ["--set", "loader1.prefetch_factor=4", "--set", "loader1.worker_threads=2"],
        timeout=240,
    )
    assert r.returncode == 0, r.stderr
    assert results(r)["first"]["prefetch_factor"] is None
    s = r.report["settings_overridden"][0]
    assert s["settings"] == {}
    assert set(s["not_applied"]) == {"prefetch_factor", "worker_threads"}


@pytest.mark.parametrize(
    "items, words",
    [
        (["num_workers=-1"], "num_workers must be an integer >= 0"),
        (["bogus=1"], "unknown key 'bogus'"),
        (["prefetch_factor=lots"], "prefetch_factor must be an integer >= 1"),
        (["persistent_workers=maybe"], "must be true or false"),
        (["multiprocessing_context=thread"], "fork or spawn or forkserver"),
        (["loader0.num_workers=2"], "counted from 1"),
        (["num_workers"], "expected [loaderN.]KEY=VALUE"),
        (["num_workers=2", "num_workers=3"], "given twice"),
        (["num_workers=0", "prefetch_factor=2"], "torch refuses"),
        (["num_workers=0", "multiprocessing_context=spawn"], "torch refuses"),
        (["loader2.num_workers=0", "loader2.persistent_workers=true"], "torch refuses"),
    ],
)
def test_bad_set_is_refused_before_the_job_runs(tmp_path, items, words):
    marker = tmp_path / "ran"
    cmd = [sys.executable, "-c", f"open({str(marker)!r}, 'w').close()"]
    args = [sys.executable, "-m", "dldoctor", "run"]
    for item in items:
        args += ["--set", item]
    proc = subprocess.run(args + ["--", *cmd], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dldoctor: error: --set"), proc.stderr
    assert words in lines[0]
    assert "Traceback" not in proc.stderr
    assert not os.path.exists(marker)  # refused before the job started


def test_parse_scopes_and_describe():
    o = settings.parse(["num_workers=4", "loader2.persistent_workers=yes", "loader2.num_workers=1"])
    assert o == {"*": {"num_workers": 4}, "2": {"persistent_workers": True, "num_workers": 1}}
    assert settings.overrides_for(o, 1) == {"num_workers": 4}
    assert settings.overrides_for(o, 2) == {"num_workers": 1, "persistent_workers": True}
    assert settings.describe(o) == (
        "--set num_workers=4 --set loader2.persistent_workers=true --set loader2.num_workers=1"
    )
