// Is the job short of memory? MemAvailable low, the memory cgroup near its limit, pages
// swapping, tasks stalled on memory (PSI). Shared by pinned_memory_pressure (a pin_memory
// loader holds locked batches) and ram_pressure (no pinned loader is the cause).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze {

/// MemAvailable (or the cgroup's headroom) under a tenth of the total: the kernel is
/// reclaiming the page cache the dataset reads depend on, and the next worker to grow meets
/// the OOM killer (the same cut as `dldoctor check`).
inline constexpr double kLowMemoryFraction = 0.10;

/// Swap traffic, pages per second in or out (1 MiB/s of 4 KiB pages), that costs a step:
/// every page swapped back in is a storage read on the path of whoever touches it.
inline constexpr double kSwapPagesPerS = 256.0;

/// PSI memory "some" avg10 (% of the last 10 s some task waited for memory) at which the
/// stalls are a visible share of the job's time.
inline constexpr double kMemPressurePct = 10.0;

/// Score of memory thrashing (low or pressured, and swapping or pressured): above any share
/// of the stall a throughput finding explains, because every step pays for it.
inline constexpr double kThrashingScore = 2.0;

/// Score of low memory alone: a risk, ranked with a bottleneck that explains 60% of the stall.
inline constexpr double kLowMemoryScore = 0.6;

/// The job's memory over the window.
struct Memory {
  std::optional<double> available_fraction;  ///< machine: MemAvailable / MemTotal (lowest)
  std::optional<int64_t> available_bytes;
  std::optional<int64_t> total_bytes;
  std::optional<double> cgroup_headroom_fraction;  ///< (limit − usage) / limit (lowest)
  std::optional<int64_t> cgroup_limit, cgroup_usage;
  std::optional<double> swap_in, swap_out, pressure;
  bool low() const noexcept {
    return (available_fraction && *available_fraction < kLowMemoryFraction) ||
           (cgroup_headroom_fraction && *cgroup_headroom_fraction < kLowMemoryFraction);
  }
  bool swapping() const noexcept {
    return (swap_in && *swap_in >= kSwapPagesPerS) || (swap_out && *swap_out >= kSwapPagesPerS);
  }
  bool pressured() const noexcept { return pressure && *pressure >= kMemPressurePct; }
  bool short_of_memory() const noexcept { return low() || swapping() || pressured(); }
  /// Low or pressured, and swapping or pressured: every step pays for it.
  bool thrashing() const noexcept { return (low() || pressured()) && (swapping() || pressured()); }
};
Memory memory_of(const JobView& job);

/// How a memory finding ranks: critical when it thrashes while a loader stalls.
report::Rank memory_rank(const Memory& m, const JobView& job);

/// mem_available_min_bytes, mem_total_bytes, the cgroup's figures, swap and PSI (when known).
void add_memory_evidence(report::Finding& f, const Memory& m);

/// "6% of RAM available, swapping": what is short, for a title.
std::string short_sentence(const Memory& m);

}  // namespace dldoctor::analyze
