// The hang doctor's verdict: every hang rule over one capture, in order of importance.
#pragma once

#include <vector>

#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::watchdog {

/// collate_deadlock, worker_died and worker_hang (critical); when none of them fires,
/// main_process_bound (info) for a main process stuck outside the loader, or an unexplained
/// worker_hang for a main process waiting inside one. Critical first, then by score.
std::vector<report::Finding> classify_hang(const HangSnapshot& snapshot,
                                           const HangContext& context);

}  // namespace dldoctor::watchdog
