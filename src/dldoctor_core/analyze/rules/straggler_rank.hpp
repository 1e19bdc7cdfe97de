// straggler_rank: in synchronous data-parallel training every rank steps at the pace of the
// slowest. The rank whose loop waits for its batches holds the others back, and they wait for
// it in the collectives (all-reduce of the gradients): their steps grow by its wait while
// their own loaders keep up. The finding names that rank, its own cause (the finding about
// its loader), what the others lose waiting, and the fix for that rank.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze::straggler_rank {

/// The other ranks' data stall may be at most this share of the gating rank's: a rank that
/// waits for its own batches nearly as long is a second straggler (or the whole job is
/// data-bound), and its own finding speaks for it.
inline constexpr double kOthersStallShare = 0.5;

/// Share of the gating rank's wait per batch that the other ranks' longer steps must show.
/// In lockstep each of their steps grows by its whole wait (they sit in the all-reduce
/// meanwhile); half allows for a collective that overlaps their own compute (DDP's buckets)
/// and for timer noise, while ranks that are simply unequal (no collective between them)
/// show no such growth at all.
inline constexpr double kWaitShownShare = 0.5;

/// Share of their loop the other ranks must lose waiting for the gating rank: below it the
/// ranks' paces differ by timer noise and the odd slow batch (a healthy two-rank job on a
/// loaded machine shows a few percent), and no fix to one rank could buy back more.
inline constexpr double kMinLostShare = 0.10;

/// Per-sample getitem time of the gating rank over the others' at which its own data is
/// heavier than theirs (larger images, longer sequences in its shard): same code and
/// settings, so the fix is to rebalance the shards, not only to speed its loader up.
inline constexpr double kHeavyDataRatio = 1.5;

/// One rank's training loop: its busiest loader (the one stepped most in the window).
struct RankLoop {
  int rank = -1;
  int loader = -1;
  int rank_loader = 0;
  int num_workers = 0;
  double data_stall_fraction = 0;
  double wait_ms = 0;  ///< per batch
  double step_ms = 0;  ///< per batch: its own compute and its wait in the collectives
  std::optional<double> getitem_p50_ms;  ///< per sample
  std::optional<double> main_cpu_pct;    ///< its main process, % of one core
};

struct Evidence {
  report::Rank rank;
  RankLoop gating;
  std::vector<RankLoop> waiting;  ///< every other rank, waiting for it
  /// The finding about the gating rank's loader that names its cause ("" none found).
  std::string cause_id, cause_fix;
  double lost_ms = 0;        ///< per step, the others' mean: their step less the gating rank's
  double lost_fraction = 0;  ///< of the others' loop (mean)
  bool heavy_data = false;   ///< its samples cost kHeavyDataRatio x the others'
  std::optional<double> others_getitem_p50_ms;
};
/// One gating rank among two or more; `found` are the other rules' findings of the window
/// (its cause is the one about its loader). Empty when the ranks move at their own pace.
std::optional<Evidence> detect(const JobView& job, const std::vector<report::Finding>& found);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::straggler_rank
