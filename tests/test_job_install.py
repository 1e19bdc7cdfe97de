"""dldoctor.job.install: the injected sitecustomize instruments every process of a job (and
chains the user's own sitecustomize), nothing is instrumented without a ring, a broken ring
disables the hooks quietly, install() is idempotent and uninstall() restores torch, and
watch()-style installs before torch is imported still hook it, uninstrumented spawned
workers included."""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap

import pytest

torch = pytest.importorskip("torch")

from _hooked_job import INJECT_DIR, Event, events, hooked_job, loader_of, watched_env  # noqa: E402
from dldoctor import _ext  # noqa: E402
from dldoctor.job import events as K  # noqa: E402
from dldoctor.job import hooks, sidelog  # noqa: E402


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    return hooked_job(tmp_path_factory)


def test_spawned_workers_run_the_users_sitecustomize_too(job):
    lid = loader_of(job, "SpawnMap")
    (w,) = events(job, lid, K.K_WORKER_START)
    assert w.pid in job.marks  # chained in the spawned worker
    assert job.result["main_pid"] in job.marks
    assert job.result["sitecustomize"] is True  # `import sitecustomize` is the user's module
    assert job.result["inject_on_path"] == []


def test_nothing_dropped_and_no_hook_errors(job):
    assert job.dropped == 0
    assert not [r for r in job.side if r.get("type") in ("hook_error", "inject_error", "hooks")]


def test_no_ring_configured_means_no_instrumentation(tmp_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(INJECT_DIR)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])
    )
    env.pop("DLDOCTOR_RING", None)
    code = (
        "import sys, torch.utils.data.dataloader as d;"
        "print(hasattr(d._MultiProcessingDataLoaderIter._next_data, '__dldoctor_orig__'),"
        " 'dldoctor.job.hooks' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False"]


def test_a_broken_ring_disables_quietly(tmp_path):
    (tmp_path / "junk").write_bytes(b"x" * 8192)
    env = watched_env(tmp_path, tmp_path / "junk")
    code = (
        "import torch; from torch.utils.data import DataLoader;"
        "print(sum(int(b.sum()) for b in DataLoader(list(range(10)), batch_size=5)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0 and out.stdout.strip() == "45" and out.stderr == ""
    (rec,) = sidelog.read_all(str(tmp_path))
    assert rec["type"] == "hook_error" and "not an event ring" in rec["error"]


def test_install_is_idempotent_and_uninstall_restores(tmp_path):
    import torch.utils.data.dataloader as dl

    names = ("__init__", "_next_data", "_get_data", "_reset", "_shutdown_workers")
    originals = {name: dl._MultiProcessingDataLoaderIter.__dict__[name] for name in names}
    single = dl._SingleProcessDataLoaderIter.__dict__["_next_data"]
    fetch = torch.utils.data._utils.fetch._MapDatasetFetcher.fetch
    loop = torch.utils.data._utils.worker._worker_loop
    ring = _ext.EventRing.create(str(tmp_path / "r"), 64)
    try:
        assert hooks.install(ring.path, str(tmp_path))
        patched = hooks.installed()["patched"]
        assert hooks.install(ring.path, str(tmp_path))
        assert hooks.installed()["patched"] == patched  # nothing wrapped twice
        assert not hooks.installed()["missing"]
        new_loop = torch.utils.data._utils.worker._worker_loop
        assert new_loop is not loop and new_loop.__dldoctor_orig__ is loop
        # Picklable by name: resolves to whatever the unpickling process has patched.
        assert pickle.loads(pickle.dumps(new_loop)) is new_loop
        # The per-batch paths are C++ hooks standing in for the originals.
        hot = dl._MultiProcessingDataLoaderIter.__dict__["_next_data"]
        assert type(hot) is _ext.HotMethod and hot.role == "multi_next"
        assert hot.original is originals["_next_data"]
        assert dl._SingleProcessDataLoaderIter.__dict__["_next_data"].role == "single_next"
        # The fetch is hooked by a worker's begin() only, and uninstall restores it too.
        assert torch.utils.data._utils.fetch._MapDatasetFetcher.fetch is fetch
        from dldoctor.job import install

        install.patch_fetchers()
        assert torch.utils.data._utils.fetch._MapDatasetFetcher.fetch.role == "fetch"
    finally:
        hooks.uninstall()
        ring.close()
    for name, fn in originals.items():
        assert dl._MultiProcessingDataLoaderIter.__dict__[name] is fn
    assert dl._SingleProcessDataLoaderIter.__dict__["_next_data"] is single
    assert torch.utils.data._utils.fetch._MapDatasetFetcher.fetch is fetch
    assert torch.utils.data._utils.worker._worker_loop is loop
    assert not _ext.trace_active()
    assert _ext.batch_context.loader == 0


WATCH_STYLE_JOB = textwrap.dedent(
    r"""
    import os, sys
    from dldoctor.job import hooks
    assert hooks.install(sys.argv[1], sys.argv[2])
    assert "torch" not in sys.modules  # hooked on import, as dldoctor.watch() may have to
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Late(Dataset):
        def __len__(self):
            return 8
        def __getitem__(self, i):
            return torch.tensor([i])

    if __name__ == "__main__":
        # Spawned worker started with no dldoctor environment: _WorkerInit instruments it.
        dl = DataLoader(Late(), batch_size=4, num_workers=1, multiprocessing_context="spawn")
        print([b.flatten().tolist() for b in dl])
    """
)


def test_install_before_torch_import_and_uninstrumented_spawned_worker(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(WATCH_STYLE_JOB)
    ring = _ext.EventRing.create(str(tmp_path / "events.ring"), 4096)
    env = {k: v for k, v in os.environ.items() if not k.startswith("DLDOCTOR_")}
    try:
        out = subprocess.run(
            [sys.executable, str(script), ring.path, str(tmp_path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        evs = [Event(*e) for e in ring.drain()]
    finally:
        ring.close()
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip() == "[[0, 1, 2, 3], [4, 5, 6, 7]]"
    (start,) = [e for e in evs if e.kind == K.K_WORKER_START]
    fetches = [e for e in evs if e.kind == K.K_WORKER_BATCH]
    assert [e.index for e in fetches] == [0, 1]  # the batch index, read from the worker loop
    assert all(e.pid == start.pid and e.worker == 0 for e in fetches)
    assert sorted(e.index for e in evs if e.kind == K.K_MAIN_BATCH) == [0, 1]
