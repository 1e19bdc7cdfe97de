// too_many_workers (seed cause 1): more worker processes than usable CPUs, and the
// scheduler shows them queueing for a CPU. The fix is a number from the usable CPUs.
#pragma once

#include <optional>
#include <utility>
#include <vector>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze {

/// Mean run-queue delay of the workers (% of wall time runnable but not running) that
/// proves contention. A fifth of the time queued costs a fifth of the workers' throughput;
/// on a machine with a CPU per worker it stays in the low single digits.
inline constexpr double kRunQueueDelayPct = 20.0;

/// Involuntary context switches per second per worker that prove contention when the
/// run-queue delay is unknown (no schedstat). The scheduler preempts a CPU-bound task that
/// shares its CPU every few milliseconds (hundreds per second); one with a CPU to itself
/// is preempted only by the odd kernel thread, well under this.
inline constexpr double kInvoluntaryCsPerS = 30.0;

/// Worker oversubscription as too_many_workers sees it (slow_getitem and slow_collate ask
/// too: proven oversubscription is the first thing to fix, they are then partial causes).
struct Oversubscription {
  int total_workers = 0;
  double usable_cpus = 0;
  std::optional<double> runq_delay_pct;        ///< mean over the workers
  std::optional<double> involuntary_cs_per_s;  ///< mean per worker
  bool proven = false;  ///< run-queue delay (or, unknown, preemption rate) shows contention
};
/// More workers than usable CPUs in the window (empty when not, or when unknowable).
std::optional<Oversubscription> oversubscription(const JobView& job) noexcept;

}  // namespace dldoctor::analyze

namespace dldoctor::analyze::too_many_workers {

struct Evidence {
  report::Rank rank;
  int loader = -1;  ///< the one stalled loader when only it has workers, else -1
  Oversubscription over;
  double data_stall_fraction = 0;                 ///< the highest of the stalled loaders
  std::vector<std::pair<int, int>> with_workers;  ///< (loader, num_workers) of those with workers
  /// Ranks on this node whose loaders have workers (1 without ranks): the node's workers are
  /// every rank's, and each rank keeps a core for its main process.
  int ranks = 1;
  std::optional<double> worker_cpu_pct;
  std::vector<std::pair<int, double>> worker_cpu_pct_each;  ///< (pid, %)
  /// The CPU left for workers when the main processes' use was measured (analyze/capacity).
  std::optional<CpuBudget> budget;
};
/// Oversubscribed workers while a loader stalls; empty when they fit or do not compete.
std::optional<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::too_many_workers
