// main_process_bound: the loader is not the limit. While the job runs, every loader keeps up
// and the main process is busy computing (info: prescribing loader changes would cry wolf).
// At a hang, no batch came for the timeout but the main process is not waiting for one: it
// is stuck in the training loop itself, and the loader is idle because nobody asks it.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/hang_evidence.hpp"
#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::analyze::main_process_bound {

/// Share of wall time (% of one core) the main process wants a CPU — running, or runnable and
/// queued for one — at which the consumer counts as busy computing. Below it the consumer
/// mostly sleeps or waits on a GPU or the network: the job is not data-bound and not
/// CPU-bound in Python either, so there is nothing to report at all. Queued time counts: on
/// a loaded machine a computing consumer runs less than it wants, but it does not sleep.
inline constexpr double kMainBusyCpuPct = 80.0;

/// How many of the main process's top frames the hang finding quotes.
inline constexpr size_t kTopFramesShown = 5;

/// While the job runs: the loaders keep up and the consumer computes.
struct Evidence {
  report::Rank rank;
  int loader = -1;                 ///< the one loader judged, else -1
  double data_stall_fraction = 0;  ///< the highest of the loaders judged
  /// That loader's wait for batches not yet made (the rest is their hand-over), when known.
  std::optional<double> stall_beyond_handover_fraction;
  double main_process_cpu_pct = 0;
  std::optional<double> consumer_step_ms, wait_per_batch_ms, consumer_batches_per_s;
  int num_workers = 0;
  int main_pid = 0;
};
/// Silent where a loader waits for batches not yet made (the data-bound rules speak) or where
/// `found`, the findings of the rules run before it, has slow_handover: its fix is a loader
/// setting, and "leave the DataLoader as it is" beside it would contradict it.
std::optional<Evidence> detect(const JobView& job, const std::vector<report::Finding>& found);
report::Finding finding(const Evidence& e);

/// At a hang: a main process whose stack is outside the DataLoader.
struct AtHang {
  report::Rank rank;
  Suspect main;  ///< the process (a pointer into the snapshot) and its reading
  double stalled_s = 0;
  /// Its most recent frames, at most kTopFramesShown, most recent first.
  std::vector<watchdog::PyFrame> top_frames() const;
};
/// One per main process outside the loader; call it only when no worker rule found a stuck
/// or dead worker.
std::vector<AtHang> detect_at_hang(const watchdog::HangSnapshot& snapshot,
                                   const watchdog::HangContext& context);
report::Finding finding(const AtHang& e);

}  // namespace dldoctor::analyze::main_process_bound
