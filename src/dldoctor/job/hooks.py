"""The entry point into the job's hooks: `install()` is what the injected `sitecustomize` and
`dldoctor.watch()` call. Instruments torch.utils.data inside every process of a watched job,
never changing what the loader yields or raises.

Where the hooks live, by concern: `events` (the vocabulary, from C++), `worker` (workers:
worker_init_fn chaining, the worker loop), `main` (the main process: iterators, hand-outs,
pin memory), `failures` (deaths and failures), `profiling` (sampled profiles of the fetch),
`install` (patching); the per-batch paths themselves are C++ (`_ext.hot_method`).
"""

from __future__ import annotations

from .install import install, installed, on_dataloader_imported, uninstall
from .process import STACK_SIGNAL

__all__ = ["STACK_SIGNAL", "install", "installed", "on_dataloader_imported", "uninstall"]
