// /proc/<pid>/task/<tid>/schedstat: time on CPU and time runnable but waiting for a CPU.
// The per-pid file (/proc/<pid>/schedstat) covers the main thread only, so process figures
// are summed over task/*.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dldoctor::sample {

/// One thread's scheduler counters, in nanoseconds since it started.
struct SchedStat {
  int64_t run_ns = 0;   ///< on a CPU
  int64_t wait_ns = 0;  ///< runnable, waiting on a run queue: the direct sign of CPU contention
  std::optional<int64_t> timeslices;  ///< times it was given a CPU
};

/// Parses "run_ns wait_ns timeslices"; empty unless both times are present.
std::optional<SchedStat> parse_schedstat(std::string_view text) noexcept;

}  // namespace dldoctor::sample
