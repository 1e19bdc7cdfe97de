"""What a DataLoader's dataset holds, measured once in the main process when its first
iterator is made: its large top-level attributes (Python containers of many objects are what
forked workers copy as they read them) and, under spawn/forkserver, the size it pickles to
(what every worker is sent at every start).

Both are bounded in time and never raise; they read the dataset's attributes (vars()), never
its properties, and pickle it the way multiprocessing would, without keeping the bytes.
"""

from __future__ import annotations

import copyreg
import itertools
import pickle
import sys
import time

ATTRS_BUDGET_S = 0.05  # the attribute walk stops here (and says it was cut)
PICKLE_BUDGET_S = 0.2  # pickling stops here: the size is then a lower bound
MIN_ELEMENTS = 1000  # smaller containers are not worth naming
MIN_BYTES = 1 << 20  # nor are smaller arrays and strings
SAMPLED_ELEMENTS = 32  # elements whose size is measured to estimate a container's
MAX_ATTRS = 16  # attributes reported, largest first
MAX_VARS = 256  # attributes of one object looked at

_CONTAINERS = (list, tuple, dict, set, frozenset)


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


def _describe(name: str, v) -> dict | None:
    if isinstance(v, _CONTAINERS):
        return _container(name, v)
    nbytes = getattr(v, "nbytes", None) if hasattr(v, "shape") else None
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
    if isinstance(v, (str, bytes, bytearray)) and len(v) >= MIN_BYTES:
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


def dataset_attrs(ds, budget_s: float = ATTRS_BUDGET_S) -> tuple[list[dict], bool]:
    """The dataset's large attributes, largest first, and whether the walk was cut short.
    Wrapped datasets (Subset.dataset, ConcatDataset.datasets) are looked into one level."""
    deadline = time.monotonic() + budget_s
    out: list[dict] = []
    todo = [("", ds, 0)]
    cut = False
    while todo:
        prefix, obj, depth = todo.pop(0)
        try:
            items = list(vars(obj).items())[:MAX_VARS]
        except TypeError:
            continue
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
            elif depth == 0 and isinstance(v, (list, tuple)) and 0 < len(v) <= 16:
                for i, d in enumerate(v):
                    if _is_dataset(d):
                        todo.append((f"{prefix}{name}[{i}].", d, 1))
    out.sort(key=lambda a: a.get("bytes") or 0, reverse=True)
    return out[:MAX_ATTRS], cut


class _OverBudget(Exception):
    pass


def pickled_size(ds, budget_s: float = PICKLE_BUDGET_S) -> dict:
    """Bytes `ds` pickles to (protocol 5; out-of-band buffers counted, tensors counted apart:
    multiprocessing sends them through shared memory), cut at the time budget."""
    t0 = time.monotonic()
    deadline = t0 + budget_s
    counts = [0, 0]  # pickled bytes, tensor bytes

    class _Sink:
        def write(self, b):
            counts[0] += b.nbytes if isinstance(b, memoryview) else len(b)
            if time.monotonic() > deadline:
                raise _OverBudget

    def _buffer(pb):
        counts[0] += pb.raw().nbytes
        return None  # out of band: counted, never copied

    p = pickle.Pickler(_Sink(), protocol=5, buffer_callback=_buffer)
    p.fast = True  # no memo: a dataset of millions of objects must not cost their memo
    torch = sys.modules.get("torch")
    if torch is not None:
        table = copyreg.dispatch_table.copy()

        def _tensor(t):
            try:
                counts[1] += t.untyped_storage().nbytes()
            except Exception:
                pass
            return (int, (0,))

        table[torch.Tensor] = _tensor
        table[torch.nn.Parameter] = _tensor
        p.dispatch_table = table
    complete = True
    try:
        p.dump(ds)
    except _OverBudget:
        complete = False
    except Exception as e:  # unpicklable, or recursive (no memo): say so, never raise
        return {"pickle_error": f"{type(e).__name__}: {e}"[:200]}
    return {
        "pickled_bytes": counts[0],
        "pickle_ms": round((time.monotonic() - t0) * 1e3, 2),
        "pickle_complete": complete,
        "shared_tensor_bytes": counts[1],
    }


def dataset_record(loader, start_method: str | None) -> dict | None:
    """The side-log record for a loader's dataset (None without one)."""
    ds = getattr(loader, "dataset", None)
    if ds is None:
        return None
    rec: dict = {"dataset_type": _type_name(ds)}
    try:
        rec["length"] = len(ds)
    except Exception:
        rec["length"] = None
    attrs, cut = dataset_attrs(ds)
    rec["attrs"] = attrs
    rec["attrs_cut"] = cut
    if start_method in ("spawn", "forkserver"):
        rec.update(pickled_size(ds))
    return rec
