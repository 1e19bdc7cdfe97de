"""`dldoctor run --set [loaderN.]KEY=VALUE`: DataLoader settings overridden in an unmodified
job, where torch validates them (a hook on `DataLoader.__init__`, which subclasses reach
through super()).

The watcher parses and validates the overrides (`parse()`, a one-line error before the job
starts) and hands them to the job as JSON in `$DLDOCTOR_SET`; in the job, `make_loader_init`
applies them to each DataLoader as it is constructed, keyed by creation order in its process
(loader 1 is the first DataLoader the process constructs), and leaves one `settings` record
per overridden loader in the side log: what was set, what it was, and what was not applied
and why. `worker_threads` is not a DataLoader argument: each worker of the loader sets its
thread pools (torch intra-op, OpenMP, MKL, OpenBLAS, OpenCV) before its first fetch.

Combinations torch refuses are resolved as torch documents them: with num_workers=0,
prefetch_factor and multiprocessing_context are None and persistent_workers False (an
override of one of them is then not applied, and the record says so); given together with
num_workers=0 in one `--set` scope they are refused by `parse()`.
"""

from __future__ import annotations

import json
import os
import re
import weakref

from .process import hide_frame, note

ENV = "DLDOCTOR_SET"
ALL = "*"  # the scope of an override without a loaderN. prefix

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
START_METHODS = ("fork", "spawn", "forkserver")


def _int(least: int):
    def conv(text: str):
        try:
            v = int(text)
        except ValueError:
            raise ValueError(f"an integer >= {least}") from None
        if v < least:
            raise ValueError(f"an integer >= {least}")
        return v

    return conv


def _bool(text: str):
    t = text.lower()
    if t in _TRUE:
        return True
    if t in _FALSE:
        return False
    raise ValueError("true or false")


def _start_method(text: str):
    if text not in START_METHODS:
        raise ValueError(" or ".join(START_METHODS))
    import multiprocessing

    if text not in multiprocessing.get_all_start_methods():
        raise ValueError(
            f"a start method this platform has ({', '.join(multiprocessing.get_all_start_methods())})"
        )
    return text


# key -> (parser, what it sets). `batch_size` changes training: only when asked for.
KEYS = {
    "num_workers": _int(0),
    "prefetch_factor": _int(1),
    "persistent_workers": _bool,
    "pin_memory": _bool,
    "multiprocessing_context": _start_method,
    "in_order": _bool,
    "worker_threads": _int(1),
    "batch_size": _int(1),
}
_ITEM = re.compile(r"^(?:loader(?P<n>[0-9]+)\.)?(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>.*)$")


def parse(items: list[str]) -> dict:
    """`--set` items -> {scope: {key: value}} (scope "*" or "N"); ValueError with a one-line
    message for a malformed item, an unknown key, a bad value, a key given twice in one
    scope, or a combination torch refuses."""
    out: dict = {}
    for item in items:
        m = _ITEM.match(item.strip())
        if not m:
            raise ValueError(f"--set {item!r}: expected [loaderN.]KEY=VALUE, e.g. num_workers=4")
        n, key, value = m.group("n"), m.group("key"), m.group("value").strip()
        if n is not None and int(n) < 1:
            raise ValueError(f"--set {item!r}: loaders are counted from 1 (loader1 is the first)")
        conv = KEYS.get(key)
        if conv is None:
            raise ValueError(f"--set {item!r}: unknown key {key!r} (one of: {', '.join(KEYS)})")
        try:
            v = conv(value)
        except ValueError as e:
            raise ValueError(f"--set {item!r}: {key} must be {e}") from None
        scope = out.setdefault(str(int(n)) if n is not None else ALL, {})
        if key in scope:
            raise ValueError(f"--set {item!r}: {key} is given twice for the same loaders")
        scope[key] = v
    for scope, kv in out.items():
        if kv.get("num_workers") == 0:
            bad = [k for k in ("prefetch_factor", "multiprocessing_context") if k in kv]
            if kv.get("persistent_workers") is True:
                bad.append("persistent_workers=true")
            if bad:
                where = "" if scope == ALL else f"loader{scope}."
                raise ValueError(
                    f"--set {where}num_workers=0 with {' and '.join(bad)}: torch refuses "
                    "these without workers"
                )
    return out


def to_env(overrides: dict) -> str:
    return json.dumps(overrides, sort_keys=True)


def overrides_for(overrides: dict, index: int) -> dict:
    """The settings for the index-th DataLoader (1-based): every-loader ones, then its own."""
    kv = dict(overrides.get(ALL) or {})
    kv.update(overrides.get(str(index)) or {})
    return kv


def describe(overrides: dict) -> str:
    """The `--set` line for these overrides (for tune's output and the report)."""
    parts = []
    for scope in sorted(overrides, key=lambda s: (s != ALL, s)):
        prefix = "" if scope == ALL else f"loader{scope}."
        for k, v in overrides[scope].items():
            parts.append(f"--set {prefix}{k}={_text(v)}")
    return " ".join(parts)


def _text(v) -> str:
    return str(v).lower() if isinstance(v, bool) else str(v)


# -- in the job -------------------------------------------------------------------------------
class Applied:
    """The overrides of this process (from $DLDOCTOR_SET), how many DataLoaders it has
    constructed, and each overridden loader's worker_threads (read by the worker hook)."""

    __slots__ = ("overrides", "created", "threads")

    def __init__(self):
        self.overrides: dict = {}
        self.created = 0
        self.threads = weakref.WeakKeyDictionary()  # loader -> worker_threads

    def configure(self, text: str | None) -> bool:
        self.overrides = {}
        if text:
            try:
                parsed = json.loads(text)
                if isinstance(parsed, dict):
                    self.overrides = parsed
            except ValueError:
                pass
        return bool(self.overrides)


APPLIED = Applied()


def _after_fork_in_child() -> None:
    APPLIED.created = 0  # a forked child constructs its own loaders from 1


def make_loader_init(orig):
    import inspect

    try:
        sig = inspect.signature(orig)
    except (TypeError, ValueError):
        sig = None

    def __init__(self, *args, **kwargs):
        APPLIED.created += 1
        index = APPLIED.created
        want = overrides_for(APPLIED.overrides, index)
        bound = None
        if want and sig is not None:
            try:
                bound = sig.bind(self, *args, **kwargs)
            except TypeError:
                pass  # the user's call is wrong: torch says how, unchanged
        if bound is None:
            try:
                return orig(self, *args, **kwargs)
            except BaseException as e:
                hide_frame(e)
                raise
        applied, was, skipped = _resolve(want, bound, sig)
        try:
            orig(*bound.args, **bound.kwargs)
        except BaseException as e:
            hide_frame(e)
            raise
        threads = want.get("worker_threads")
        if threads is not None:
            if int(getattr(self, "num_workers", 0) or 0) > 0:
                try:
                    APPLIED.threads[self] = int(threads)
                    applied["worker_threads"], was["worker_threads"] = int(threads), None
                except TypeError:
                    skipped["worker_threads"] = "this loader cannot be weakly referenced"
            else:
                skipped["worker_threads"] = "num_workers=0: no workers"
        try:
            _record(index, applied, was, skipped)
        except Exception:
            pass

    return __init__


def _resolve(want: dict, bound, sig) -> tuple[dict, dict, dict]:
    """Puts `want` into the bound constructor arguments (in place): (applied, was, skipped)."""
    params = sig.parameters
    args = bound.arguments

    def current(key):
        if key in args:
            return args[key]
        p = params.get(key)
        return p.default if p is not None else None

    applied, was, skipped = {}, {}, {}
    for key, value in want.items():
        if key == "worker_threads":
            continue
        if key not in params:
            skipped[key] = "this torch's DataLoader has no such argument"
            continue
        if key == "batch_size" and current("batch_sampler") is not None:
            skipped[key] = "the loader has a batch_sampler (torch refuses batch_size with it)"
            continue
        old = current(key)
        if key == "multiprocessing_context" and old is not None and not isinstance(old, str):
            old = getattr(old, "_name", None) or str(old)
        was[key] = old
        args[key] = value
        applied[key] = value
    if not current("num_workers"):
        # As torch documents: no prefetch_factor, no persistent workers and no
        # multiprocessing_context without workers.
        for key, none in (
            ("prefetch_factor", None),
            ("persistent_workers", False),
            ("multiprocessing_context", None),
        ):
            if key not in params:
                continue
            if key in applied:  # asked for, on a loader without workers: not applied
                args[key] = was.pop(key)
                applied.pop(key)
                skipped[key] = f"num_workers=0: torch takes no {key} without workers"
            elif current(key) not in (None, False) and "num_workers" in applied:
                was[key] = current(key)  # the user's, which our num_workers=0 makes invalid
                args[key] = applied[key] = none
    return applied, was, skipped


def _record(index: int, applied: dict, was: dict, skipped: dict) -> None:
    def plain(d):
        return {
            k: v if v is None or isinstance(v, (bool, int, float, str)) else str(v)
            for k, v in d.items()
        }

    note(
        "settings",
        loader=index,
        main_pid=os.getpid(),
        settings=plain(applied),
        was=plain({k: v for k, v in was.items() if k in applied}),
        not_applied=skipped,
    )


def thread_pool_env(n: int) -> dict:
    return {k: str(n) for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


def set_worker_threads(n: int) -> None:
    """In a worker, before its first fetch: its thread pools to `n` threads."""
    os.environ.update(thread_pool_env(n))  # pools created later, and the worker's children
    import sys

    torch = sys.modules.get("torch")
    if torch is not None:
        try:
            torch.set_num_threads(n)  # intra-op: OpenMP and MKL as torch built them
        except Exception:
            pass
    cv2 = sys.modules.get("cv2")
    if cv2 is not None:
        try:
            cv2.setNumThreads(n)
        except Exception:
            pass
