// The monitor's recorded run as plain Python objects: the series for Report.series, the
// live view's figures, and the raw events and counters for --trace. All need the GIL.
#pragma once

#include <nanobind/nanobind.h>

#include "dldoctor_core/monitor/series.hpp"
#include "dldoctor_core/monitor/trace_store.hpp"

namespace dldoctor::ext {

/// {"t0_ns", "interval_s", "t_s": [...], "loaders": [{"loader", "batches", "batches_per_s",
/// "data_stall_pct"}], "processes": [{"role", "loader", "worker", "pids", "cpu_pct",
/// "runq_delay_pct", "getitem_ms", "collate_ms", "state", "batches", "getitem_ms_sample",
/// "collate_ms_sample"}], "machine": {...}, "processes_cut", "gpus": [{"index", "job",
/// "utilization_pct", "memory_used_bytes", "job_memory_bytes", "memory_total_bytes"}],
/// "gpu_not_measured"}; None for unknown points.
nanobind::dict series_to_dict(const monitor::SeriesData& d);
/// {"t_ns", "window_s", "loaders": [...], "processes": [...], "machine": {...}, "gpus": [...],
/// "gpu_not_measured"}.
nanobind::dict live_to_dict(const monitor::LiveData& d);
/// {"events": [(kind, pid, t_ns, flags, loader, worker, index, count, v0, v1, v2, v3)],
/// "machine": [(t_ns, cpu_busy_pct, shm_used, shm_total, mem_available)],
/// "processes": [(t_ns, pid, state, cpu_pct)], "gpus": [(t_ns, index, utilization_pct,
/// memory_used_bytes, job_memory_bytes)], "dropped_events", "dropped_counters",
/// "max_events"}.
nanobind::dict trace_to_dict(const monitor::TraceContents& c);

}  // namespace dldoctor::ext
