// worker_hang: no batch for the hang timeout, and a live worker is stuck somewhere other
// than a lock in collate_fn (that is collate_deadlock): in the dataset (getitem), in its
// startup or worker_init_fn (worker_init), in uninterruptible I/O (io), elsewhere (other).
#pragma once

#include <vector>

#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::analyze {

/// Appends one critical `worker_hang` finding per loader with a stuck worker; the evidence
/// names the stage ("getitem", "worker_init", "io", "collate", "other").
void rule_worker_hang(const watchdog::HangSnapshot& snapshot, const watchdog::HangContext& context,
                      std::vector<report::Finding>& out);

/// The main process waits inside loader `loader` and nothing else explains it: a critical
/// `worker_hang` with stage "other" that says what is known (the worker given the awaited
/// batch, when the context names it). For classify_hang, after every other hang rule.
report::Finding unexplained_loader_hang(const watchdog::HangSnapshot& snapshot,
                                        const watchdog::HangContext& context, int loader);

}  // namespace dldoctor::analyze
