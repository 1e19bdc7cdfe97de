"""The Python API: `dldoctor.watch()` and `dldoctor.profile(loader, batches=N)`.

Same engine as `dldoctor run`, with the job being this process: the hooks are installed
here (and, through the environment, in spawned workers), the monitor samples this process
and its children.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from .report import Report

_ENV_KEYS = ("PYTHONPATH", "DLDOCTOR_RING", "DLDOCTOR_RUN_DIR")


class Doctor:
    """What `watch()` yields: `report()` gives the findings so far, final after the block."""

    def __init__(self, watcher):
        self._watcher = watcher
        self._final: Report | None = None

    def report(self) -> Report:
        if self._final is not None:
            return self._final
        from . import report as _report

        self._watcher.poll()
        decided = self._watcher.monitor.decide(True)
        return Report(
            verdict=decided["verdict"],
            findings=decided["findings"],
            system=_report.system_section(self._watcher.facts),
            loaders=self._watcher.monitor.loaders(),
        )


@contextmanager
def watch():
    """Watch every DataLoader iterated inside the block; `doc.report()` has the findings."""
    from .job import hooks as torch_hooks
    from .watcher.watcher import Watcher

    watcher = Watcher()
    saved = {k: os.environ.get(k) for k in _ENV_KEYS}
    doc = Doctor(watcher)
    try:
        watcher.collect_facts()
        os.environ.update({k: v for k, v in watcher.child_env().items() if k in _ENV_KEYS})
        torch_hooks.install(ring_path=watcher.ring_path, run_dir=watcher.run_dir)
        watcher.start(os.getpid())
        yield doc
    finally:
        try:
            torch_hooks.uninstall()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            doc._final = watcher.finish()
            watcher.cleanup()


def profile(loader, batches: int = 200) -> Report:
    """Drive `loader` alone (no model) for up to `batches` batches and diagnose it.

    With no consumer work, the loader is the bottleneck by construction: the report says
    what limits it (CPU in getitem or collate, waiting on I/O, too many workers ...).
    """
    if batches <= 0:
        raise ValueError("batches must be positive")
    with watch() as doc:
        n = 0
        it = iter(loader)
        try:
            for _ in it:
                n += 1
                if n >= batches:
                    break
        finally:
            shutdown = getattr(it, "_shutdown_workers", None)
            if shutdown is not None:
                shutdown()
    return doc.report()
