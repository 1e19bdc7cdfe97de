// main_process_bound at hang time: no batch for the hang timeout, but the main process is
// not waiting for one: it is stuck in the training loop itself, and the loader is idle
// because nobody asks it for data. Info, not critical: it is not a loader problem.
#pragma once

#include <vector>

#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::watchdog {

/// How many of the main process's top frames the finding quotes.
inline constexpr size_t kTopFramesShown = 5;

/// Appends an info `main_process_bound` finding per main process whose stack is outside the
/// DataLoader; call it only when no worker rule found a stuck or dead worker.
void rule_stuck_main(const HangSnapshot& snapshot, const HangContext& context,
                     std::vector<report::Finding>& out);

}  // namespace dldoctor::watchdog
