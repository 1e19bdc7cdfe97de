// Machine facts as the plain nested dicts Python sees (None for unknown); shared by the system
// glue (collect_facts) and the monitor's, which collects them for a run.
#pragma once

#include <nanobind/nanobind.h>

#include "dldoctor_core/system/facts.hpp"

namespace dldoctor::ext {

/// {"cpu", "memory", "shm", "limits", "container", "pressure", "cgroup_version", "gpu"}; call
/// with the GIL. "gpu": {"measured", "not_measured", "driver_version", "devices": [{"index",
/// "name", "uuid", "memory_total_bytes", "memory_used_bytes", "utilization_pct"}],
/// "device_errors"}.
nanobind::dict facts_to_dict(const system::Facts& facts);

}  // namespace dldoctor::ext
