// cow_memory_growth: forked workers copy the main process's memory page by page as they read
// the dataset, because Python writes a reference count into every object it touches. Seen
// as each worker's Private_Dirty (smaps_rollup) growing with the samples it has read; the
// slope is projected to the end of the epoch against the memory available. The culprits are
// the dataset's large Python containers, named from the main process's inspection of it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze::cow_memory_growth {

inline constexpr double kMiB = 1024.0 * 1024.0;

/// smaps reads a worker needs for a slope: two are a line through anything, three show a
/// trend.
inline constexpr size_t kCowMinPoints = 3;

/// Samples the reads must span: fewer say nothing about growth *per sample*.
inline constexpr int64_t kCowMinSamples = 256;

/// Growth of one worker's Private_Dirty over the reads that counts. A worker's own
/// allocations (a batch's tensors, the allocator's arenas) settle within its first batches
/// at a few MiB; copy-on-write of a dataset's objects goes on for as long as it reads.
inline constexpr double kCowMinGrowthBytes = 32 * kMiB;

/// Bytes copied per sample read that count as growth with the samples: a page (4 KiB) per
/// few dozen samples. Reading a Python list of objects in random order copies up to a page
/// per sample; reading a numpy array copies nothing after warm-up.
inline constexpr double kCowMinBytesPerSample = 256;

/// The growth must still go on in the newer half of the reads (by samples read) at this
/// slope: copy-on-write of a dataset's objects lasts as long as the reading, while a worker's
/// own allocations (its first batches of large tensors, the allocator's arenas: tens of MiB
/// with 512 KiB samples) rise early and then stay flat. Projecting such an early rise to the
/// epoch's end would call a settled worker a growing one.
inline constexpr double kCowMinRecentBytesPerSample = kCowMinBytesPerSample;

/// ...and at this share of the worker's mean slope over all its reads: growth that goes on,
/// not a rise that ended in a drift.
inline constexpr double kCowMinRecentShare = 0.25;

/// Intervals between two reads over which the copy must rise at that recent rate:
/// copy-on-write of a dataset's objects goes on from read to read, while a copy made once
/// shows as one step. A full garbage collection writes to every object the collector tracks:
/// in slow_handover.py (a torch job's heap), each worker's Private_Dirty went from 12 to
/// 46 MiB within 0.2 s, every worker and the main process at the same moment, RSS flat, then
/// stayed (none with the collector disabled; a page either process writes stops being shared
/// by both). Read in the last interval, or followed by a drift of 0.2 MiB over 464 samples
/// (450 bytes a sample), that one step passed every threshold above and read as growth.
inline constexpr size_t kCowMinRisingIntervals = 2;

/// Projected further growth of all the workers to the end of the epoch at which the
/// finding is a warning: enough memory to matter on any machine, and it multiplies with
/// num_workers. Below it (but growing) the finding is informational.
inline constexpr double kCowWarnProjectedBytes = 256 * kMiB;

/// Share of the available memory the projected growth may take before it is critical:
/// the job is then on its way to the OOM killer or to swapping within the epoch.
inline constexpr double kCowCriticalShareOfAvailable = 0.5;

/// An attached job (no hooks) gives no samples read: its workers' series are read over time.
/// The reads must span this long for a slope...
inline constexpr int64_t kCowMinSpanNs = 3'000'000'000;
/// ...copy this much from the parent over it (a worker's own allocations are taken off by
/// its RSS, as with the samples; half kCowMinGrowthBytes, the window being seconds)...
inline constexpr double kCowMinTimeGrowthBytes = 16 * kMiB;
/// ...and still copy at this rate in the newer half: 1 MiB/s is 3.5 GiB an hour per worker.
inline constexpr double kCowMinBytesPerSecond = 1 * kMiB;
/// How far the rate is projected when the epoch's length in samples is unknown: each worker
/// copies at its rate for this long, up to what it still shares with the main process.
inline constexpr double kCowHorizonS = 600;

/// Score when the memory available is unknown: growth matters, its share cannot be said.
inline constexpr double kUnknownShareScore = 0.1;

/// One worker whose private memory grows with the samples it reads.
struct Growth {
  int pid = 0;
  int worker = -1;
  double slope = 0;  ///< bytes per sample (bytes per second when over_time)
  bool over_time = false;
  double seconds = 0;  ///< the span of the reads
  double first = 0, last = 0;
  int64_t samples_first = 0, samples_last = 0;
  std::optional<int64_t> rss, pss;
};

struct Evidence {
  report::Rank rank;
  int loader = 0;
  int num_workers = 0;
  std::vector<Growth> growing;
  double slope_mean = 0;  ///< bytes per sample (per second when over_time), growing workers
  bool over_time = false; ///< an attached job: rates per second, projected kCowHorizonS
  double now_total = 0, grown = 0, pss_total = 0;
  std::optional<double> per_worker_epoch;  ///< samples each worker reads in an epoch
  double projected_more = 0;  ///< all workers, to the end of the epoch (or kCowHorizonS)
  std::optional<int64_t> available;
  bool dataset_inspected = false;
  std::vector<DatasetAttr> culprits;  ///< the dataset's Python containers of objects
};
std::vector<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::cow_memory_growth
