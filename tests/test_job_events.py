"""One event vocabulary: trace/event.hpp defines it, the binding exports it, and every Python
reader (the job's hooks, the Chrome trace) takes it from there. This fails when the header's
enums and what Python sees disagree, or when a Python module copies the numbers again."""

from __future__ import annotations

import re
from pathlib import Path

from dldoctor import _ext
from dldoctor.job import events
from dldoctor.reporters import chrome_trace

ROOT = Path(__file__).resolve().parents[1]
HEADER = ROOT / "src" / "dldoctor_core" / "trace" / "event.hpp"


def _snake(cpp_name: str) -> str:
    """kIterStart -> iter_start."""
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cpp_name[1:]).lower()


def header_enum(name: str) -> dict[str, int]:
    """The enumerators of enum `name` in event.hpp, by their Python name, values evaluated."""
    text = HEADER.read_text()
    m = re.search(r"enum (?:class )?" + name + r"\b[^{]*\{(.*?)\};", text, re.S)
    assert m, f"enum {name} not found in {HEADER}"
    body = re.sub(r"///[^\n]*|//[^\n]*", "", m.group(1))
    out = {}
    for item in body.split(","):
        item = item.strip()
        if not item:
            continue
        key, value = (s.strip() for s in item.split("=", 1))
        assert re.fullmatch(r"[0-9<\s]+", value), value
        out[_snake(key)] = eval(value)  # only digits and shifts, checked above
    return out


def test_the_binding_exports_every_enumerator_of_the_header():
    vocabulary = _ext.trace_vocabulary()
    kinds = header_enum("EventKind")
    assert kinds.pop("none") == 0
    assert vocabulary["kind"] == kinds
    assert vocabulary["loader_flag"] == header_enum("LoaderFlags")
    assert vocabulary["batch_flag"] == header_enum("BatchFlags")
    assert vocabulary["start_method"] == header_enum("StartMethod")
    assert vocabulary["iter_end_reason"] == header_enum("IterEndReason")


def test_python_reads_the_values_from_the_binding():
    v = _ext.trace_vocabulary()
    for name, value in v["kind"].items():
        assert getattr(events, "K_" + name.upper()) == value
    for name, value in v["loader_flag"].items():
        assert getattr(events, "F_" + name.upper()) == value
    assert events.B_PROFILED == v["batch_flag"]["profiled"]
    assert events.START_METHODS == {k: x for k, x in v["start_method"].items() if k != "unknown"}
    reasons = v["iter_end_reason"]
    assert (events.END_EXHAUSTED, events.END_SHUTDOWN, events.END_ERROR) == (
        reasons["exhausted"],
        reasons["shut_down"],
        reasons["creation_failed"],
    )
    # The Chrome trace uses the same names, not numbers of its own.
    for name in ("K_ITER_START", "K_WORKER_BATCH", "K_MAIN_BATCH", "K_ITER_END", "B_PROFILED"):
        assert getattr(chrome_trace, name) == getattr(events, name)
    assert set(chrome_trace.END_REASONS) == set(reasons.values())


def test_an_event_tuple_has_the_named_fields(tmp_path):
    ring = _ext.EventRing.create(str(tmp_path / "r"), 16)
    try:
        ring.emit(events.K_WORKER_BATCH, loader=2, worker=1, index=3, count=4, weight=7)
        (e,) = ring.drain()
    finally:
        ring.close()
    got = dict(zip(events.EVENT_FIELDS, e))
    assert len(e) == len(events.EVENT_FIELDS)
    assert (got["kind"], got["loader"], got["worker"], got["index"], got["count"]) == (
        events.K_WORKER_BATCH,
        2,
        1,
        3,
        4,
    )
    assert got["weight"] == 7


def test_no_python_module_copies_the_numbers():
    copies = []
    for path in (ROOT / "src" / "dldoctor").rglob("*.py"):
        if path.name == "events.py" and path.parent.name == "job":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.match(r"\s*(K|F|B|END)_[A-Z_]+\s*(,\s*\w+\s*)*=\s*[\d(]", line):
                copies.append(f"{path.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not copies, "event vocabulary copied instead of read from dldoctor.job.events"
