// straggler_worker: a few batches (or one worker's) take far longer than the rest, and with
// in-order delivery the loop waits for each of them while later batches are already done
// (head-of-line blocking). Shown by the batch-time distribution per worker, the slow batches
// with their sample indices, and the head-of-line wait. Fix: in_order=False, then the slow
// samples' work moved offline or bucketed.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "dldoctor_core/analyze/data_bound.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze::straggler_worker {

/// A batch is slow when it takes this many times the loader's median batch: far beyond the
/// ±50% that the same work varies by on a busy machine.
inline constexpr double kSlowBatchRatio = 5.0;

/// A worker is a straggler when its median batch takes this many times the median of the
/// other workers' medians (same work split round-robin should take the same time).
inline constexpr double kSlowWorkerRatio = 2.0;

/// Head-of-line wait, as a share of the loop, that makes the stragglers a cause of the
/// stall: the same cut as the data-stall gate itself.
inline constexpr double kHolShareOfLoop = kDataStallFraction;

/// Share of the loop's wait that must be head-of-line for the finding to be critical: the
/// stragglers, not a general shortage, then hold the loop up.
inline constexpr double kHolShareOfWait = 0.3;

/// Batches a worker needs for its median to count.
inline constexpr int64_t kMinWorkerBatches = 5;

struct Evidence {
  report::Rank rank;
  int loader = 0;
  double data_stall_fraction = 0;
  double head_of_line_s = 0, hol_share = 0, hol_of_wait = 0;
  int64_t head_of_line_batches = 0;
  double fetch_p50_ms = 0;
  std::optional<double> fetch_p99_ms, fetch_max_ms;
  std::vector<WorkerFetch> worker_fetch;
  std::optional<WorkerFetch> slow_worker;
  double worker_ratio = 0;
  std::vector<WorkerBatchRecord> slow;  ///< batches of kSlowBatchRatio x the median, slowest first
  std::set<int64_t> slow_samples;       ///< dataset indices of the slow batches, when reported
  bool short_of_demand = false;         ///< the workers are also short on average
};
std::vector<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::straggler_worker
