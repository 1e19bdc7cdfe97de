// /proc/stat's first "cpu" line: CPU time of the whole machine, in clock ticks, summed over all
// CPUs. Busy share = 1 - (idle + iowait) / total between two passes.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dldoctor::sample {

/// Machine CPU time so far, in clock ticks over all CPUs.
struct CpuTimes {
  int64_t busy = 0;   ///< user + nice + system + irq + softirq + steal
  int64_t total = 0;  ///< busy + idle + iowait
};

/// Parses /proc/stat; empty unless its "cpu " line has at least user, nice, system and idle.
std::optional<CpuTimes> parse_cpu_times(std::string_view text) noexcept;

}  // namespace dldoctor::sample
