// collate_deadlock (seed cause 6): no batch for the hang timeout, and a live worker sits
// inside collate_fn waiting on a lock, queue or condition, using no CPU. With fork and a
// multi-threaded main process at fork time, the likely cause is a lock copied into the
// worker while held. A hang-time finding only: the watchdog captures, this reads the capture.
#pragma once

#include <vector>

#include "dldoctor_core/analyze/hang_evidence.hpp"
#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::analyze::collate_deadlock {

/// True when the process is deadlocked in collate as this rule sees it (worker_hang asks
/// too, so one stuck worker is never reported twice).
bool deadlocked_in_collate(const ProcessReading& reading) noexcept;

/// The deadlocked workers of one loader.
struct Evidence {
  report::Rank rank;
  SuspectGroup stuck;
  double stalled_s = 0;
  /// The workers were forked while the main process ran other Python threads.
  bool forked_with_threads = false;
};
std::vector<Evidence> detect(const watchdog::HangSnapshot& snapshot,
                             const watchdog::HangContext& context);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::collate_deadlock
