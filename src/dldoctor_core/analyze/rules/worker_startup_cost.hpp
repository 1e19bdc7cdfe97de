// worker_startup_cost: the time from an iterator's creation to its first batch, paid again
// every epoch when the workers are not persistent (a fresh interpreter and a fresh copy of the
// dataset per worker under spawn/forkserver), is a large share of each epoch. Fix:
// persistent_workers=True, a dataset that is light to pickle, or fork where it is safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze::worker_startup_cost {

inline constexpr double kMiB = 1024.0 * 1024.0;

/// Share of the epochs' wall time spent restarting workers at which the restarts count:
/// below a tenth, persistent workers would buy back less than the noise of the epochs.
inline constexpr double kStartupShare = 0.10;

/// Share at which the restarts are the bottleneck of the run (critical).
inline constexpr double kStartupCriticalShare = 0.25;

/// Start-up per restart below which it is not worth a finding, whatever the share: forked
/// workers of a light dataset start in tens of milliseconds, and a run of very short
/// epochs would otherwise show a large share of nothing.
inline constexpr double kMinStartupS = 0.1;

/// Pickled dataset size from which spawn/forkserver pickling is named as a cost of its own:
/// it is sent to every worker and unpickled there at each start, at roughly 100-500 MB/s.
inline constexpr double kHeavyPickleBytes = 16 * kMiB;

/// A start-up paid once (info) ranks this far below one paid every epoch of the same share.
inline constexpr double kOnceScoreFactor = 0.1;

/// One epoch's start-up.
struct EpochCost {
  int64_t ordinal = 0;
  double latency_s = 0;
  double overhead_s = 0;  ///< latency beyond one batch's fetch, and the later workers' waits
  double wall_s = 0;
  bool restart = false;  ///< workers started afresh for it (not its loader's first)
};

struct Evidence {
  report::Rank rank;
  int loader = 0;
  std::vector<EpochCost> epochs;
  double wall = 0, restart_overhead = 0, first_overhead = 0;
  int restarts = 0;
  double restart_share = 0, first_share = 0;
  bool repeated = false;           ///< paid every epoch; else once (persistent or one epoch), heavy
  bool spawned = false;            ///< spawn or forkserver
  bool heavy = false;              ///< spawned with a dataset of kHeavyPickleBytes or more
  std::string method;              ///< "spawn", "forkserver", "fork", "unknown"
  std::optional<int64_t> pickled;  ///< the dataset's pickled size
  bool pickle_complete = true;
  std::optional<double> fetch_p50_ms;
  bool persistent = false;
  int num_workers = 0;
};
std::vector<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::worker_startup_cost
