// Every rule, in the order they run: one file per finding id in analyze/rules/, each a pure
// function of what the job showed. While the job runs and at its end the rules read a
// JobView (the streaming verdict over the recent window, the report over the whole run); at
// a hang they read the watchdog's capture. Ordering and the verdict are analyze/verdict's.
#pragma once

#include <vector>

#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::analyze {

/// Every rule over one window of the job, most important finding first.
std::vector<report::Finding> run_rules(const JobView& job);

/// The hang rules over one capture: collate_deadlock, worker_died and worker_hang
/// (critical); when none of them fires, main_process_bound (info) for a main process stuck
/// outside the loader; then a worker_hang for a loader the main process waits in that
/// nothing explains. Most important first.
std::vector<report::Finding> classify_hang(const watchdog::HangSnapshot& snapshot,
                                           const watchdog::HangContext& context);

/// classify_hang's findings, and whether the capture shows a job still moving (the
/// watchdog's classifier): with no finding and a main process ending its iterator (joining
/// workers that exit), nothing is stuck yet.
watchdog::HangJudgement judge_hang(const watchdog::HangSnapshot& snapshot,
                                   const watchdog::HangContext& context);

}  // namespace dldoctor::analyze
