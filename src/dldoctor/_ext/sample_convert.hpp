// A sampler Snapshot as the plain nested dict Python sees (None for unknown); shared by every
// binding that hands snapshots to Python (sampler, watchdog, analyzer).
#pragma once

#include <nanobind/nanobind.h>

#include "dldoctor_core/sample/snapshot.hpp"

namespace dldoctor::ext {

/// {"t_ns", "cost_ns", "seq", "machine": {...}, "gpu": {"measured", "not_measured", "devices":
/// [...]}, "processes": [{...}, ...]}; call with the GIL.
nanobind::dict snapshot_to_dict(const sample::Snapshot& snapshot);

/// One process of a snapshot as a dict (the items of "processes").
nanobind::dict process_to_dict(const sample::ProcessSample& process);

}  // namespace dldoctor::ext
