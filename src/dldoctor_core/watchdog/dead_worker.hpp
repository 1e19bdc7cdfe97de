// worker_died at hang time: a worker the loader still waits on has exited (no /proc entry)
// or is a zombie. A richer worker_died rule over the event stream (exit events, exceptions)
// may live in analyze/; this one sees only what the hang capture shows.
#pragma once

#include <vector>

#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::watchdog {

/// Appends one critical `worker_died` finding per loader with a dead worker.
void rule_dead_worker(const HangSnapshot& snapshot, const HangContext& context,
                      std::vector<report::Finding>& out);

}  // namespace dldoctor::watchdog
