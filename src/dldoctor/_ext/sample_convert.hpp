// A sampler Snapshot as the plain nested dict Python sees (None for unknown); shared by every
// binding that hands snapshots to Python (sampler, watchdog, analyzer).
#pragma once

#include <nanobind/nanobind.h>

#include "dldoctor_core/sample/snapshot.hpp"
#include "fields.hpp"

namespace dldoctor::ext {

// The fields a snapshot's dict has out (snapshot_to_dict) and in (snapshot_from_dict) alike. A
// process writes more than is read back (active_threads, smaps_fresh, faults), so its
// figures are two tables with those between them.
DLDOCTOR_FIELDS(SnapshotClockFields, t_ns, cost_ns, seq);
DLDOCTOR_FIELDS(MachineFields, cpu_busy_pct, cpu_steal_pct, mem_available_bytes, swap_in_per_s,
                swap_out_per_s, cpu_pressure_some, io_pressure_some, mem_pressure_some,
                shm_used_bytes, shm_total_bytes);
DLDOCTOR_FIELDS(ProcessIdFields, pid, ppid);
DLDOCTOR_FIELDS(ProcessUseFields, cpu_pct, runq_delay_pct, runq_wait_per_slice_us,
                voluntary_cs_per_s, involuntary_cs_per_s, rss_bytes, pss_bytes,
                private_dirty_bytes);
DLDOCTOR_FIELDS(ProcessIoFields, read_bytes_per_s, rchar_per_s, read_bytes_total, rchar_total,
                cpu_ns_total, open_fds);

/// {"t_ns", "cost_ns", "seq", "machine": {...}, "gpu": {"measured", "not_measured", "devices":
/// [...]}, "processes": [{...}, ...]}; call with the GIL.
nanobind::dict snapshot_to_dict(const sample::Snapshot& snapshot);

/// One process of a snapshot as a dict (the items of "processes").
nanobind::dict process_to_dict(const sample::ProcessSample& process);

}  // namespace dldoctor::ext
