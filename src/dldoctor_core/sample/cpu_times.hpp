// /proc/stat: the first "cpu" line (CPU time of the whole machine, in clock ticks, summed over
// all CPUs; busy share = 1 - (idle + iowait) / total between two passes) and the "processes"
// line (forks since boot: while it stands still, no process can have joined a tree).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dldoctor::sample {

/// Machine CPU time so far, in clock ticks over all CPUs.
struct CpuTimes {
  int64_t busy = 0;   ///< user + nice + system + irq + softirq + steal
  int64_t total = 0;  ///< busy + idle + iowait
  /// Time this (virtual) machine's CPUs were ready to run and the hypervisor ran something
  /// else: a stall no process's run queue shows.
  int64_t steal = 0;
};

/// Parses /proc/stat; empty unless its "cpu " line has at least user, nice, system and idle.
std::optional<CpuTimes> parse_cpu_times(std::string_view text) noexcept;

/// The "processes" line of /proc/stat: processes and threads created since boot.
std::optional<int64_t> parse_fork_count(std::string_view text) noexcept;

}  // namespace dldoctor::sample
