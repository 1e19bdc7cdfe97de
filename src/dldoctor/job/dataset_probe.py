"""What a DataLoader's dataset holds, measured once in the main process when its first
iterator is made: its large top-level attributes (Python containers of many objects are what
forked workers copy as they read them), its samples per epoch, and under spawn/forkserver the
bytes multiprocessing sends each worker it starts.

None of it calls into the user's objects, nor reshapes them: the attributes are read one by
one as the instance holds them (never a property, never a user type's __len__, never vars(),
which on CPython 3.11 would turn the instance's attributes into a dict for good, and every
`self.x` of the user's __getitem__, in every worker forked after it, would then miss the
interpreter's attribute cache), the samples per epoch come from what torch already
holds (its samplers' and datasets' own fields) or from the batches of a finished epoch, and
the bytes are counted as multiprocessing writes them while torch starts its workers (the
dataset is never pickled a second time: a user's __getstate__ or __reduce__ runs exactly as
often as without dldoctor).
"""

from __future__ import annotations

import gc
import itertools
import sys
import threading
import time

ATTRS_BUDGET_S = 0.05  # the attribute walk stops here (and says it was cut)
MIN_ELEMENTS = 1000  # smaller containers are not worth naming
MIN_BYTES = 1 << 20  # nor are smaller arrays and strings
SAMPLED_ELEMENTS = 32  # elements whose size is measured to estimate a container's
MAX_ATTRS = 16  # attributes reported, largest first
MAX_VARS = 256  # attributes of one object looked at

_CONTAINERS = (list, tuple, dict, set, frozenset)
_ARRAY_MODULES = ("numpy", "torch")


def _type_name(v) -> str:
    t = type(v)
    mod = t.__module__
    return t.__qualname__ if mod == "builtins" else f"{mod}.{t.__qualname__}"


def _sizeof(o) -> int:
    try:
        n = sys.getsizeof(o)
        t = type(o)
        if (t is tuple or t is list) and len(o) <= 8:  # a record: (path, label)
            n += sum(sys.getsizeof(x) for x in o)
        elif t is dict and len(o) <= 8:
            n += sum(sys.getsizeof(k) + sys.getsizeof(x) for k, x in o.items())
        return n
    except Exception:
        return 0


def _container(name: str, v) -> dict | None:
    n = len(v)
    if n < MIN_ELEMENTS:
        return None
    if isinstance(v, dict):
        sample = [(k, x) for k, x in itertools.islice(v.items(), SAMPLED_ELEMENTS)]
        per = sum(_sizeof(k) + _sizeof(x) for k, x in sample) / max(1, len(sample))
        first = sample[0][1] if sample else None
    else:
        if isinstance(v, (list, tuple)):
            step = max(1, n // SAMPLED_ELEMENTS)
            sample = [v[i] for i in range(0, n, step)][:SAMPLED_ELEMENTS]
        else:
            sample = list(itertools.islice(v, SAMPLED_ELEMENTS))
        per = sum(_sizeof(x) for x in sample) / max(1, len(sample))
        first = sample[0] if sample else None
    return {
        "name": name,
        "type": type(v).__name__,
        "elements": n,
        "bytes": int(sys.getsizeof(v) + per * n),
        "element_type": _type_name(first) if first is not None else "",
        "python_objects": True,
    }


def _array_type(t) -> bool:
    """numpy's and torch's own array types (their attributes are theirs, not the user's)."""
    return (t.__module__ or "").partition(".")[0] in _ARRAY_MODULES


def _describe(name: str, v) -> dict | None:
    t = type(v)
    if t in _CONTAINERS:  # exact types: a user's subclass may define its own __len__
        return _container(name, v)
    nbytes = getattr(v, "nbytes", None) if _array_type(t) and hasattr(v, "shape") else None
    if isinstance(nbytes, int):  # numpy arrays, torch tensors
        if nbytes < MIN_BYTES:
            return None
        kind = getattr(getattr(v, "dtype", None), "kind", "")
        shape = getattr(v, "shape", ())
        return {
            "name": name,
            "type": _type_name(v),
            "elements": int(shape[0]) if len(shape) else 1,
            "bytes": nbytes,
            "element_type": str(getattr(v, "dtype", "")),
            # A numpy array of dtype object holds Python objects: the same problem as a list.
            "python_objects": kind == "O",
        }
    if t in (str, bytes, bytearray) and len(v) >= MIN_BYTES:
        return {
            "name": name,
            "type": type(v).__name__,
            "elements": len(v),
            "bytes": len(v),
            "element_type": "",
            "python_objects": False,
        }
    return None


def _is_dataset(v) -> bool:
    t = type(v)
    return any(c.__name__ in ("Dataset", "IterableDataset") for c in t.__mro__[1:])


_NAMES: dict = {}  # type -> the attribute names its classes' code uses


def _code_names(code, out: set) -> None:
    out.update(code.co_names)
    for c in code.co_consts:
        if hasattr(c, "co_names"):
            _code_names(c, out)


def _attribute_names(t: type) -> tuple:
    """Names the code of t's classes uses (`self.x` is one), less those the classes define
    themselves (a method, a property: reading it would bind or run it)."""
    names = _NAMES.get(t)
    if names is None:
        used: set = set()
        for cls in t.__mro__[:-1]:  # not object
            for v in list(cls.__dict__.values()):
                for f in (v, getattr(v, "__func__", None), getattr(v, "fget", None)):
                    code = getattr(f, "__code__", None)
                    if code is not None:
                        _code_names(code, used)
        names = _NAMES[t] = tuple(
            sorted(n for n in used if not any(n in cls.__dict__ for cls in t.__mro__))
        )
    return names


def instance_attrs(obj) -> list:
    """(name, value) of obj's instance attributes, without vars(): each name its classes'
    code uses is read as the instance holds it (object.__getattribute__ on a name no class
    defines: no descriptor, no __getattr__, no user code) and kept when the value is one the
    instance refers to. An attribute that only code outside its classes sets goes unnamed,
    unless the instance's dict exists already (then it is read as it is)."""
    t = type(obj)
    if t.__dictoffset__ == 0:
        return []  # no instance attributes beyond slots
    found = []
    for name in _attribute_names(t):
        try:
            found.append((name, object.__getattribute__(obj, name)))
        except Exception:
            continue
    refs = gc.get_referents(obj)
    for r in refs:  # a dict made already (by the user's code): the whole of it, as it is
        if type(r) is dict and found and all(r.get(n, r) is v for n, v in found):
            return [(k, v) for k, v in r.items() if type(k) is str]
    held = {id(r) for r in refs}
    return [(n, v) for n, v in found if id(v) in held]


def dataset_attrs(ds, budget_s: float = ATTRS_BUDGET_S) -> tuple[list[dict], bool]:
    """The dataset's large attributes, largest first, and whether the walk was cut short.
    Wrapped datasets (Subset.dataset, ConcatDataset.datasets) are looked into one level."""
    deadline = time.monotonic() + budget_s
    out: list[dict] = []
    todo = [("", ds, 0)]
    cut = False
    while todo:
        prefix, obj, depth = todo.pop(0)
        items = instance_attrs(obj)[:MAX_VARS]
        for name, v in items:
            if time.monotonic() > deadline:
                cut = True
                todo.clear()
                break
            try:
                a = _describe(prefix + name, v)
            except Exception:
                a = None
            if a is not None:
                out.append(a)
            elif depth == 0 and _is_dataset(v):
                todo.append((prefix + name + ".", v, 1))
            elif depth == 0 and type(v) in (list, tuple) and 0 < len(v) <= 16:
                for i, d in enumerate(v):
                    if _is_dataset(d):
                        todo.append((f"{prefix}{name}[{i}].", d, 1))
    out.sort(key=lambda a: a.get("bytes") or 0, reverse=True)
    return out[:MAX_ATTRS], cut


def _builtin_len(v) -> int | None:
    """len() of a builtin sequence or a numpy/torch array; None for anything else (a user's
    type: its __len__ is never called)."""
    t = type(v)
    if t in (list, tuple, range):
        return len(v)
    if _array_type(t):
        shape = getattr(v, "shape", None)
        if shape is not None and len(shape) >= 1:
            return int(shape[0])
    return None


def _dataset_length(ds) -> int | None:
    """The length of one of torch's own datasets, from the fields torch computed (None for
    any other dataset, whose __len__ is the user's)."""
    from torch.utils import data as tud

    t = type(ds)
    if t is tud.TensorDataset:
        return _builtin_len(ds.tensors[0]) if ds.tensors else None
    if t is tud.ConcatDataset:
        sizes = ds.cumulative_sizes
        return int(sizes[-1]) if type(sizes) is list and sizes else None
    if t is tud.Subset:
        return _builtin_len(ds.indices)
    return None


def known_length(loader) -> int | None:
    """Samples per epoch as torch already holds them: a torch sampler's own count (RandomSampler
    with num_samples, WeightedRandomSampler, SubsetRandomSampler, DistributedSampler), or for
    SequentialSampler and RandomSampler the length of one of torch's own datasets. None
    otherwise: the user's dataset and sampler are never asked (a __len__ may list a bucket)."""
    try:
        from torch.utils import data as tud

        s = getattr(loader, "sampler", None)
        t = type(s)
        if t is tud.RandomSampler:
            n = s._num_samples
            if n is not None:
                return int(n) if type(n) is int else None
            return _dataset_length(s.data_source)
        if t is tud.SequentialSampler:
            return _dataset_length(s.data_source)
        if t is tud.SubsetRandomSampler:
            return _builtin_len(s.indices)
        if t in (tud.WeightedRandomSampler, tud.DistributedSampler):
            n = s.num_samples
            return n if type(n) is int else None
    except Exception:
        pass
    return None


def length_from_iterator(it) -> int | None:
    """Samples per epoch as torch itself measured them when the iterator `it` started: once
    its workers were handed their first indices, torch's BatchSampler generator holds the
    sampler's iterator, whose state has the length torch asked the dataset for (a
    SequentialSampler's range; a RandomSampler's local n). Only torch's own objects and
    builtins are read (no user code runs); None for anything else."""
    try:
        from torch.utils import data as tud

        loader_gen = getattr(it, "_sampler_iter", None)
        if getattr(loader_gen, "gi_code", None) is not tud.BatchSampler.__iter__.__code__:
            return None
        frame = loader_gen.gi_frame
        inner = frame.f_locals.get("sampler_iter") if frame is not None else None
        sampler = frame.f_locals.get("self").sampler if frame is not None else None
        if type(sampler) is tud.SequentialSampler and type(inner) is _RANGE_ITERATOR:
            _, (r,), *_ = inner.__reduce__()  # (iter, (range(0, n),), position)
            return len(r) if type(r) is range else None
        if (
            type(sampler) is tud.RandomSampler
            and sampler._num_samples is None
            and not sampler.replacement
            and getattr(inner, "gi_code", None) is tud.RandomSampler.__iter__.__code__
            and inner.gi_frame is not None
        ):
            n = inner.gi_frame.f_locals.get("n")
            return n if type(n) is int else None
    except Exception:
        pass
    return None


_RANGE_ITERATOR = type(iter(range(0)))


class SpawnBytes:
    """Counts the bytes multiprocessing writes to start each spawned/forkserver worker (the
    preparation data and the pickled Process with its arguments: the dataset, the loader's
    functions), by wrapping multiprocessing.reduction.dump for this thread while torch starts
    its workers. The pickling is torch's own; nothing is pickled twice."""

    def __init__(self):
        self.bytes = 0
        self.ns = 0
        self.processes = 0
        self._orig = None
        self._wrapper = None

    def __enter__(self):
        try:
            from multiprocessing import process, reduction
        except Exception:
            return self
        orig = reduction.dump
        tid = threading.get_ident()

        def dump(obj, file, *args, **kwargs):
            if threading.get_ident() != tid:
                return orig(obj, file, *args, **kwargs)
            try:
                before = file.tell()
            except Exception:
                before = None
            t0 = time.perf_counter_ns()
            try:
                return orig(obj, file, *args, **kwargs)
            finally:
                try:
                    self.ns += time.perf_counter_ns() - t0
                    if before is not None:
                        self.bytes += file.tell() - before
                    if isinstance(obj, process.BaseProcess):
                        self.processes += 1
                except Exception:
                    pass

        self._orig, self._wrapper = orig, dump
        reduction.dump = dump
        return self

    def __exit__(self, *exc):
        if self._orig is not None:
            from multiprocessing import reduction

            if reduction.dump is self._wrapper:
                reduction.dump = self._orig
            self._orig = self._wrapper = None
        return False

    def figures(self) -> dict:
        """Per worker started: bytes sent and ms spent pickling them (empty: none started)."""
        if not self.processes:
            return {}
        return {
            "pickled_bytes": self.bytes // self.processes,
            "pickle_ms": round(self.ns / self.processes / 1e6, 2),
            "pickle_complete": True,
        }


def dataset_record(loader) -> dict | None:
    """The side-log record for a loader's dataset (None without one); under spawn/forkserver
    the caller adds SpawnBytes.figures() once the workers started."""
    ds = getattr(loader, "dataset", None)
    if ds is None:
        return None
    rec: dict = {"dataset_type": _type_name(ds), "length": known_length(loader)}
    attrs, cut = dataset_attrs(ds)
    rec["attrs"] = attrs
    rec["attrs_cut"] = cut
    return rec
