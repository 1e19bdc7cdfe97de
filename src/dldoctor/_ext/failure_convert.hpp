// Failure notes from the plain dicts the watcher builds out of side-log records
// (dldoctor/_failure_notes.py): one dict, one analyze::FailureNote. Needs the GIL. A value
// of the wrong type raises dldoctor::Error with a one-line message.
#pragma once

#include <nanobind/nanobind.h>

#include "dldoctor_core/analyze/failure_log.hpp"

namespace dldoctor::ext {

/// {"kind": "death" | "error" | "runtime" | "cgroup_memory" | "cuda_memory", ...fields of
/// the matching struct by name; None or missing is unknown}.
analyze::FailureNote failure_note_from_dict(nanobind::handle d);

}  // namespace dldoctor::ext
