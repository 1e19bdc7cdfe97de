// Machine facts as the plain nested dicts Python sees (None for unknown); shared by the system
// glue (collect_facts) and the monitor's, which collects them for a run.
#pragma once

#include <nanobind/nanobind.h>

#include "dldoctor_core/system/facts.hpp"
#include "fields.hpp"

namespace dldoctor::ext {

// The fields of the facts' flat parts, the same keys out (facts_to_dict, probe_storage) and in
// (facts_from_dict, storage_from_dict).
DLDOCTOR_FIELDS(CpuFields, online, affinity, cgroup_quota, physical_cores, usable, quota_source);
DLDOCTOR_FIELDS(MemoryFields, total_bytes, available_bytes, swap_total_bytes, swap_free_bytes,
                cgroup_limit_bytes, cgroup_usage_bytes, cgroup_working_set_bytes, cgroup_source);
DLDOCTOR_FIELDS(ShmFields, path, total_bytes, free_bytes, fs_type, options);
DLDOCTOR_FIELDS(LimitFields, nofile_soft, nofile_hard, memlock_soft, memlock_hard, open_fds);
DLDOCTOR_FIELDS(StorageFields, path, mount_point, fs_type, source, network_fs, block_device,
                device_numbers, rotational, files, bytes, count_truncated, read_mb_s, probe_bytes,
                probe_cached);

/// {"cpu", "memory", "shm", "limits", "container", "pressure", "cgroup_version", "gpu"}; call
/// with the GIL. "gpu": {"measured", "not_measured", "driver_version", "devices": [{"index",
/// "name", "uuid", "memory_total_bytes", "memory_used_bytes", "utilization_pct"}],
/// "device_errors"}.
nanobind::dict facts_to_dict(const system::Facts& facts);

}  // namespace dldoctor::ext
