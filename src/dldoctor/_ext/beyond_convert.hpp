// Side-log records of issue 6 (dataset inspection, slow batches) as the analyzer's notes.
// Lenient: a field of the wrong type is unknown, never an error (the records come from the
// hooks, and a lost note must not end a run). Needs the GIL.
#pragma once

#include <nanobind/nanobind.h>

#include "dldoctor_core/analyze/view.hpp"

namespace dldoctor::ext {

/// {"dataset_type", "length", "attrs": [{"name", "type", "elements", "bytes", "element_type",
/// "python_objects"}], "pickled_bytes", "pickle_ms", "pickle_complete",
/// "shared_tensor_bytes"}.
analyze::DatasetNotes dataset_notes_from_dict(nanobind::handle d);
/// {"pid", "worker", "index", "fetch_ns", "samples": [int, ...]}.
analyze::SlowBatchNote slow_batch_from_dict(nanobind::handle d);

}  // namespace dldoctor::ext
