// What the watcher passes on from the job's side logs, as the analyzer's notes: failure notes
// (dldoctor/watcher/failure_notes.py builds them from worker deaths, error texts, runtime
// facts, the memory cgroup, CUDA memory), what the main process measured of a dataset, and
// slow batches with their samples. Needs the GIL.
#pragma once

#include <nanobind/nanobind.h>

#include "dldoctor_core/analyze/failure_log.hpp"
#include "dldoctor_core/analyze/view.hpp"

namespace dldoctor::ext {

/// {"kind": "death" | "error" | "runtime" | "cgroup_memory" | "cuda_memory", ...fields of
/// the matching struct by name; None or missing is unknown}. A value of the wrong type
/// raises dldoctor::Error with a one-line message.
analyze::FailureNote failure_note_from_dict(nanobind::handle d);

/// {"dataset_type", "length", "attrs": [{"name", "type", "elements", "bytes", "element_type",
/// "python_objects"}], "pickled_bytes", "pickle_ms", "pickle_complete",
/// "shared_tensor_bytes"}. Lenient: a field of the wrong type is unknown (the record comes
/// straight from the hooks, and a lost note must not end a run).
analyze::DatasetNotes dataset_notes_from_dict(nanobind::handle d);
/// {"pid", "worker", "index", "fetch_ns", "samples": [int, ...]}; lenient as above.
analyze::SlowBatchNote slow_batch_from_dict(nanobind::handle d);

}  // namespace dldoctor::ext
