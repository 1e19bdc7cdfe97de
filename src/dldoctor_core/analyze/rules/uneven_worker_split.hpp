// uneven_worker_split: an IterableDataset's workers run out of data at different times, and
// the loop, starved, goes on with fewer workers than it has. torch gives every worker its own
// copy of an IterableDataset and no sampler: what each yields is the dataset's own split
// (webdataset and Hugging Face datasets deal whole shards, a hand-written __iter__ whatever
// it does with get_worker_info()). Fewer shards than workers, or shards that do not divide
// evenly, leave workers idle. Shown by the time each worker's fetch raised StopIteration
// against its epoch's last hand-out. Fix: a split that gives every worker data to the end.
#pragma once

#include <vector>

#include "dldoctor_core/analyze/data_bound.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze::uneven_worker_split {

/// Share of the workers' time (num_workers x the epochs' time) they spent with their data run
/// out while the loop went on, from which the split can be a cause: a tenth of the workers'
/// time is a tenth more capacity once each has data. A well-split epoch ends with its workers
/// running out within a few batches of each other, a few percent of an epoch.
inline constexpr double kMinIdleShare = 0.10;

/// Share of the loop's waits that must fall while a worker had run out: the stall is then the
/// short-handed stretches' (4 shards on 3 workers: the loop keeps up while all three read and
/// waits once two are done). A loader short of workers all along waits as much before as
/// after, and its short-handed stretch is only the end of each epoch.
inline constexpr double kShortHandedWaitShare = 0.5;

/// Epoch time (in the window) the split is judged over: the end of an epoch of a second or
/// two is the workers' last batches, not their shares.
inline constexpr double kMinEpochS = 2.0;

struct Evidence {
  report::Rank rank;
  int loader = 0;
  int num_workers = 0;
  double data_stall_fraction = 0;
  WorkerSplit split;
};
std::vector<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

/// The loader's workers idle without data for kMinIdleShare of their time or more, over
/// kMinEpochS of epochs at least, and the loop's waits fall mostly (kShortHandedWaitShare)
/// while they do (whether or not the loop stalls).
bool uneven(const LoaderView& l) noexcept;

}  // namespace dldoctor::analyze::uneven_worker_split
