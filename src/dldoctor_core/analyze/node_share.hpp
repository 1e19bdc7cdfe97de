// The node's main processes and what each holds of the budgets they share. In a multi-rank
// job every rank is a main process with its own loaders and workers, and all of them run at
// once on one node: /dev/shm, RAM and pinned memory are spent by all ranks together, so the
// rules that judge those budgets sum the ranks' shares and name each one. A rank's own
// loaders take turns (a training loop iterates one loader at a time: train, then
// validation), so within a rank the largest loader is what it holds at once.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dldoctor_core/analyze/view.hpp"

namespace dldoctor::analyze {

/// One main process of the node (a rank in a multi-rank job) and the loaders it feeds.
struct RankShare {
  int rank = -1;     ///< the rank a report names (RankId::shown), -1 none known
  int main_pid = 0;  ///< 0 unknown
  std::vector<const LoaderView*> loaders;  ///< in the view's order
  /// "rank 1"; "process 1234" for a main process without a rank; "the job" when neither.
  std::string name() const;
};

/// The node's main processes, ranks ascending, then those without a rank in the order their
/// first loader appears in `job`: loaders are
/// grouped by rank when it is known, else by their main process's pid (loaders of unknown
/// main process form one group); a pid and a rank name the same process when either matches.
/// A job with one main process has one share.
std::vector<RankShare> rank_shares(const JobView& job);

/// "rank 0: 14 MiB, rank 1: 14 MiB": each share's figure, in the shares' order (figures
/// that are empty are left out).
std::string shares_text(const std::vector<std::pair<std::string, double>>& shares);

/// Each share's sum of one per-process peak (`field` of ProcAgg: descriptors, resident
/// memory) over its main process, counted once, and its loaders' workers, as (name, value)
/// in the shares' order; shares without the figure are left out, and a single share gives
/// nothing (a figure per rank says something only beside another rank's).
std::vector<std::pair<std::string, int64_t>> peak_per_share(const std::vector<RankShare>& shares,
                                                            std::optional<int64_t> ProcAgg::*field);

/// The share (index into `shares`) whose main process or one of whose loaders' workers is
/// `pid`; empty when none.
std::optional<size_t> share_of_pid(const std::vector<RankShare>& shares, int pid);

}  // namespace dldoctor::analyze
