// The analyzer's values as the plain Python objects the package uses, and back: findings and
// loader summaries out; facts, storage, events, snapshots and hot functions in. Shared by
// every binding that owns an analyze::Session (the Analyzer here, the C++ monitor).
// All of them need the GIL. Bad input raises dldoctor::Error with a one-line message.
#pragma once

#include <nanobind/nanobind.h>

#include <vector>

#include "dldoctor_core/analyze/session.hpp"
#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/sample/snapshot.hpp"
#include "dldoctor_core/system/facts.hpp"
#include "dldoctor_core/trace/event.hpp"

namespace dldoctor::ext {

/// {"id", "severity", "title", "evidence": {name: float | str}, "fix", "why", "loader", "score"}.
nanobind::dict finding_to_dict(const report::Finding& f);
/// A list of finding dicts, in the given order.
nanobind::list findings_to_list(const std::vector<report::Finding>& findings);
/// The fields of a finding dict that ordering needs (id, severity, score, loader); missing
/// ones take their defaults.
report::Finding finding_from_dict(nanobind::handle d);

/// One loader's whole-run figures: config (num_workers, batch_size, ...) flat beside the
/// figures (batches, batches_per_s, data_stall_pct, ...); None for unknown.
nanobind::dict loader_summary_to_dict(const analyze::LoaderSummary& s);
nanobind::list loader_summaries_to_list(const std::vector<analyze::LoaderSummary>& loaders);

/// The nested dict `collect_facts()` returns (cpu.usable, memory.available_bytes,
/// shm.total_bytes, pressure.io_some_avg10 ...); a missing key or None is unknown.
system::Facts facts_from_dict(nanobind::handle d);
/// The dict `probe_storage()` returns.
system::StorageFacts storage_from_dict(nanobind::handle d);
/// The 12-tuple (kind, pid, t_ns, flags, loader, worker, index, count, v0, v1, v2, v3).
trace::Event event_from_tuple(nanobind::handle t);
/// The dict shape of a sampler pass ({"t_ns", "machine": {...}, "processes": [...]});
/// None or a missing key is unknown.
sample::Snapshot snapshot_from_dict(nanobind::handle d);
/// {"name", "location" (or "file" and "line"), "cumulative_ms", "calls"}.
analyze::HotFunction hot_function_from_dict(nanobind::handle d);

}  // namespace dldoctor::ext
