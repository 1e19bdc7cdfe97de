// collate_deadlock: no batch for the hang timeout, and a live worker sits inside collate_fn
// waiting on a lock, queue or condition, using no CPU. With fork and a multi-threaded main
// process at fork time, the likely cause is a lock copied into the worker while held.
#pragma once

#include <vector>

#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"
#include "dldoctor_core/watchdog/process_reading.hpp"

namespace dldoctor::analyze {

/// Appends one critical `collate_deadlock` finding per loader with such a worker.
void rule_collate_deadlock(const watchdog::HangSnapshot& snapshot,
                           const watchdog::HangContext& context,
                           std::vector<report::Finding>& out);

/// True when the process is deadlocked in collate as this rule sees it (used by worker_hang
/// so one stuck worker is never reported twice).
bool deadlocked_in_collate(const watchdog::ProcessReading& reading) noexcept;

}  // namespace dldoctor::analyze
