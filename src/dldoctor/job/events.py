"""The event vocabulary of the ring, for Python. Its one definition is the C++ header
(src/dldoctor_core/trace/event.hpp): the binding exports it (`_ext.trace_vocabulary()`) and
this module only gives its values the names the hooks and the Chrome trace use.
"""

from __future__ import annotations

from .. import _ext

_VOCABULARY = _ext.trace_vocabulary()
_KIND = _VOCABULARY["kind"]
_LOADER_FLAG = _VOCABULARY["loader_flag"]
_BATCH_FLAG = _VOCABULARY["batch_flag"]
_END_REASON = _VOCABULARY["iter_end_reason"]

# Event kinds (trace::EventKind).
K_ITER_START = _KIND["iter_start"]
K_WORKER_BATCH = _KIND["worker_batch"]
K_MAIN_BATCH = _KIND["main_batch"]
K_WORKER_START = _KIND["worker_start"]
K_WORKER_EXIT = _KIND["worker_exit"]
K_WORKER_EXCEPTION = _KIND["worker_exception"]
K_ITER_END = _KIND["iter_end"]
K_WORKER_DIED = _KIND["worker_died"]
K_WORKER_DRAINED = _KIND["worker_drained"]  # a worker's IterableDataset share ran out

# Bits of flags for kIterStart (trace::LoaderFlags).
F_PIN_MEMORY = _LOADER_FLAG["pin_memory"]
F_PERSISTENT_WORKERS = _LOADER_FLAG["persistent_workers"]
F_IN_ORDER = _LOADER_FLAG["in_order"]
F_ITERABLE_DATASET = _LOADER_FLAG["iterable_dataset"]
F_DROP_LAST = _LOADER_FLAG["drop_last"]
F_CUSTOM_COLLATE = _LOADER_FLAG["custom_collate"]

# Bits of flags for kWorkerBatch (trace::BatchFlags).
B_PROFILED = _BATCH_FLAG["profiled"]  # the fetch ran under the sampling profiler: slower

# v2 of kIterStart (trace::StartMethod), by the name multiprocessing uses; 0 unknown.
START_METHODS = {k: v for k, v in _VOCABULARY["start_method"].items() if k != "unknown"}

# v0 of kIterEnd (trace::IterEndReason): why the epoch ended.
END_EXHAUSTED = _END_REASON["exhausted"]  # StopIteration: every batch was handed out
END_SHUTDOWN = _END_REASON["shut_down"]  # shut down or dropped before the end
END_ERROR = _END_REASON["creation_failed"]  # creating the iterator failed

# The fields of an event tuple (EventRing.drain, Monitor.trace_events), in order.
EVENT_FIELDS = tuple(_VOCABULARY["event_fields"])
