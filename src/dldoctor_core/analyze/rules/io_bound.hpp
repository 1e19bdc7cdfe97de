// io_bound (seed cause 4): the loop waits and the workers spend most of each fetch off-CPU,
// waiting for storage, the network or a pipe. Off-CPU time inside fetch is the proof;
// storage reads, io pressure and a network filesystem say what the workers wait for.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/capacity.hpp"

namespace dldoctor::analyze {

/// A dataset under this share of memory stays in the page cache (or can be copied to RAM):
/// the job and the rest of the cache need the other half (the same cut `dldoctor check`
/// makes of RAM).
inline constexpr double kCacheFitFraction = 0.5;

}  // namespace dldoctor::analyze

namespace dldoctor::analyze::io_bound {

/// Storage reads (read_bytes) per second, all workers together, above which the waits are
/// credited to the device. Below 1 MB/s a disk is idle whatever the workers wait for.
inline constexpr double kStorageReadBytesPerS = 1e6;

/// Share of the bytes read (rchar) that came from the device (read_bytes) for the reads to
/// count as storage reads; below it the page cache serves most of them and the device is
/// not what the workers wait for.
inline constexpr double kStorageShare = 0.5;

/// Lower bound on the on-CPU share when sizing workers by the CPUs they would use: below
/// 5 % the measure is noise, and a worker still costs memory and a process.
inline constexpr double kMinOnCpuForSizing = 0.05;

struct Evidence {
  report::Rank rank;
  FetchFigures fetch;
  double busy = 0;                 ///< wants a CPU this share of the fetch (on-CPU + queued)
  double on_cpu = 0;               ///< on a CPU this share of the fetch
  bool may_be_contention = false;  ///< run-queue delay unknown, workers may outnumber CPUs
  std::optional<double> read_bytes_per_s, rchar_per_s;  ///< the fetching processes
  bool from_storage = false;  ///< the reads come from the device, not the page cache
  std::optional<double> io_pressure_pct;
  std::optional<system::StorageFacts> storage;  ///< the dataset's, when a data dir was named
  bool network = false;
  int recommended_workers = 0;  ///< 0: no more workers to prescribe
  std::optional<double> usable_cpus;
  std::optional<int64_t> data_bytes;     ///< the dataset's size, when counted in full
  std::optional<int64_t> mem_available;  ///< lowest seen, else at the start
  bool fits_in_ram = false;
  int prefetch_factor = kDefaultPrefetchFactor;
  /// Attached (no hooks): where the sampled stacks of the fetch were, hottest first.
  std::string waiting_in;
};
/// One per stalled loader whose workers mostly wait while fetching and cannot keep up.
std::vector<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::io_bound
