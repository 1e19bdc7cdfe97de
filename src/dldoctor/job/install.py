"""Patching: which torch functions the hooks replace, installing them (now, or as soon as
torch.utils.data.dataloader is imported) and taking them out again. `install()` is the one
entry point the injected `sitecustomize` and `dldoctor.watch()` call.
"""

from __future__ import annotations

import atexit
import functools
import os
import sys

from .. import _ext
from . import failures, main, profiling, settings, sidelog, worker
from .events import END_SHUTDOWN
from .process import (
    PROCESS,
    STACK_SIGNAL,
    lock,
    note,
    register_stack_dump,
    unregister_stack_dump,
)


class Patches:
    """What install() replaced, and the hook points this torch does not have."""

    __slots__ = ("applied", "missing", "import_hook")

    def __init__(self):
        self.applied: list = []  # (owner, name, original, wrapper)
        self.missing: list = []
        self.import_hook = None


PATCHES = Patches()


def _hot(role: str):
    """A factory of C++ batch hooks of one role (no Python frame per batch)."""
    return functools.partial(_ext.hot_method, role)


def _patch(owner, name: str, factory, where: str) -> None:
    if owner is None:
        PATCHES.missing.append(where)
        return
    orig = owner.__dict__.get(name) if isinstance(owner, type) else getattr(owner, name, None)
    if orig is None:
        PATCHES.missing.append(f"{where}.{name}")
        return
    if getattr(orig, "__dldoctor_orig__", None) is not None:
        return  # already ours
    wrapper = factory(orig)
    functools.update_wrapper(wrapper, orig)  # same __module__/__qualname__: pickles by name
    wrapper.__dldoctor_orig__ = orig
    setattr(owner, name, wrapper)
    PATCHES.applied.append((owner, name, orig, wrapper))


def _patch_torch(dl) -> None:
    """Apply every hook to a fully executed torch.utils.data.dataloader module."""
    mods = sys.modules
    worker_mod = mods.get("torch.utils.data._utils.worker")
    pin = mods.get("torch.utils.data._utils.pin_memory")
    sig = mods.get("torch.utils.data._utils.signal_handling")
    single = getattr(dl, "_SingleProcessDataLoaderIter", None)
    multi = getattr(dl, "_MultiProcessingDataLoaderIter", None)
    if settings.APPLIED.overrides:  # dldoctor run --set: only then is DataLoader.__init__ hooked
        _patch(getattr(dl, "DataLoader", None), "__init__", settings.make_loader_init, "DataLoader")
    _patch(single, "__init__", main.make_single_init, "_SingleProcessDataLoaderIter")
    _patch(single, "_next_data", _hot("single_next"), "_SingleProcessDataLoaderIter")
    _patch(multi, "__init__", main.make_multi_init, "_MultiProcessingDataLoaderIter")
    _patch(multi, "_reset", main.make_reset, "_MultiProcessingDataLoaderIter")
    _patch(multi, "_next_data", _hot("multi_next"), "_MultiProcessingDataLoaderIter")
    _patch(multi, "_get_data", _hot("get_data"), "_MultiProcessingDataLoaderIter")
    _patch(multi, "_shutdown_workers", main.make_shutdown, "_MultiProcessingDataLoaderIter")
    _patch(worker_mod, "_worker_loop", worker.make_worker_loop, "worker")
    _patch(pin, "pin_memory", main.make_pin_memory, "pin_memory")
    _patch(
        sig,
        "_error_if_any_worker_fails",
        functools.partial(failures.make_error_if_any_worker_fails, iters=main.ITERS),
        "signal_handling",
    )
    worker.CTX.wait_hooked = any(o is multi and n == "_get_data" for o, n, _, _ in PATCHES.applied)
    _note_missing()


def patch_fetchers() -> None:
    """Hook the fetchers' `fetch`: in a DataLoader worker only (worker.begin). The main
    process has none: a single-process iterator's fetch is timed by its `_next_data` hook,
    and a hook there would add a C level to every batch of the fastest loops."""
    fetch = sys.modules.get("torch.utils.data._utils.fetch")
    missing = len(PATCHES.missing)
    for cls_name in ("_MapDatasetFetcher", "_IterableDatasetFetcher"):
        _patch(getattr(fetch, cls_name, None), "fetch", _hot("fetch"), cls_name)
    if len(PATCHES.missing) > missing:
        _note_missing()


def _note_missing() -> None:
    if PATCHES.missing:
        torch = sys.modules.get("torch")
        note(
            "hooks",
            missing=sorted(set(PATCHES.missing)),
            torch=getattr(torch, "__version__", None) if torch else None,
        )


def on_dataloader_imported(module) -> None:
    """Called right after torch.utils.data.dataloader has executed (import hook)."""
    with lock:
        if PROCESS.installed and PROCESS.emit is not None:
            try:
                _patch_torch(module)
            except Exception as e:
                note("hook_error", where="patch", error=f"{type(e).__name__}: {e}")


class _DataLoaderImportHook:
    """A sys.meta_path finder that lets torch.utils.data.dataloader load normally and
    instruments it as soon as it has executed (for watch() before torch is imported)."""

    TARGET = "torch.utils.data.dataloader"

    def find_spec(self, fullname, path=None, target=None):
        if fullname != self.TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        exec_module = getattr(loader, "exec_module", None)
        if exec_module is None:
            return spec

        def exec_and_patch(module):
            exec_module(module)
            on_dataloader_imported(module)

        try:
            loader.exec_module = exec_and_patch  # this spec's own loader instance
        except Exception:
            return spec
        return spec


def _after_fork_in_child() -> None:
    # A forked child (a worker, mostly) inherits the parent's iterators, loader ids, stack
    # handler and file. The iterators and ids are the parent's to report; the stack file is
    # replaced by the child's own.
    main.ITERS.clear()
    main.PINS.pending.clear()
    worker.CTX.forget_states()
    settings.APPLIED.created = 0  # a forked child counts the loaders it constructs from 1
    if PROCESS.installed:
        register_stack_dump()


def _at_exit() -> None:
    # An iterator still alive when the process ends (a loop stopped mid-epoch) ends its epoch
    # now, while the interpreter still runs: its kIterEnd carries the sample's tail, which a
    # weakref callback during interpreter teardown may never send.
    for st in list(main.ITERS.states.values()):
        try:
            main.iter_end(st, END_SHUTDOWN)
        except Exception:
            pass


def _configure_batch_hooks() -> None:
    worker.CTX.configure(
        iters=main.ITERS.states,
        pin_ns=main.PINS.pending,
        batch_bytes=worker.batch_bytes,
        fetch_error=worker.on_fetch_error,
        slow_fetch=worker.on_slow_fetch,
        frame_index=worker.frame_index,
        profile_start=profiling.start,
        profile_finish=profiling.finish,
        next_error=main.on_next_error,
        get_data_error=main.on_get_data_error,
        cuda_memory=failures.cuda_memory,
    )


def install(ring_path: str | None = None, run_dir: str | None = None) -> bool:
    """Instrument torch.utils.data in this process, writing to the ring at ring_path
    (default: $DLDOCTOR_RING) and side logs under run_dir (default: $DLDOCTOR_RUN_DIR).
    Idempotent; patches now if the loader module is loaded, else as soon as it is imported.
    False (and nothing patched) when no ring is configured or it cannot be opened."""
    ring_path = ring_path or os.environ.get("DLDOCTOR_RING")
    run_dir = run_dir or os.environ.get("DLDOCTOR_RUN_DIR")
    if not ring_path:
        return False
    p = PROCESS
    with lock:
        p.run_dir = run_dir
        sidelog.configure(run_dir)
        settings.APPLIED.configure(os.environ.get(settings.ENV))
        try:
            _ext.trace_open(ring_path)
        except Exception as e:
            note("hook_error", where="trace_open", error=f"{type(e).__name__}: {e}")
            return False
        p.ring_path = ring_path
        p.emit = _ext.trace_emit
        p.next_loader_id = _ext.trace_next_loader_id
        _configure_batch_hooks()
        p.installed = True
        if not p.fork_hook:
            p.fork_hook = True
            try:
                os.register_at_fork(after_in_child=_after_fork_in_child)
                atexit.register(_at_exit)  # forked workers leave by os._exit: not theirs
            except Exception:
                pass
        register_stack_dump()
        failures.install_excepthook()
        dl = sys.modules.get("torch.utils.data.dataloader")
        if dl is not None and hasattr(dl, "_MultiProcessingDataLoaderIter"):
            try:
                _patch_torch(dl)
            except Exception as e:
                note("hook_error", where="patch", error=f"{type(e).__name__}: {e}")
        elif PATCHES.import_hook is None:
            PATCHES.import_hook = _DataLoaderImportHook()
            sys.meta_path.insert(0, PATCHES.import_hook)
    return True


def uninstall() -> None:
    """Restore every patched function and stop writing events (idempotent)."""
    p = PROCESS
    with lock:
        for owner, name, orig, wrapper in reversed(PATCHES.applied):
            try:
                current = (
                    owner.__dict__.get(name)
                    if isinstance(owner, type)
                    else getattr(owner, name, None)
                )
                if current is wrapper:
                    setattr(owner, name, orig)
            except Exception:
                pass
        PATCHES.applied.clear()
        PATCHES.missing.clear()
        failures.uninstall_excepthook()
        if PATCHES.import_hook is not None:
            try:
                sys.meta_path.remove(PATCHES.import_hook)
            except ValueError:
                pass
            PATCHES.import_hook = None
        for st in list(main.ITERS.states.values()):
            main.iter_end(st, END_SHUTDOWN)
        main.ITERS.clear()
        main.PINS.pending.clear()
        worker.CTX.reset()
        p.emit = None
        p.next_loader_id = None
        p.installed = False
        unregister_stack_dump()
        try:
            _ext.trace_close()
        except Exception:
            pass


def installed() -> dict:
    """What is hooked in this process (for tests and `dldoctor check`)."""
    return {
        "installed": PROCESS.installed,
        "ring": PROCESS.ring_path,
        "run_dir": PROCESS.run_dir,
        "patched": [f"{getattr(o, '__name__', o)}.{n}" for o, n, _, _ in PATCHES.applied],
        "missing": sorted(set(PATCHES.missing)),
        "stack_signal": STACK_SIGNAL,
    }
