// The processes of the machine that used the CPU most over a short window (two readings of
// every /proc/<pid>/stat): what `dldoctor check` names when something else competes for the
// CPU, so the user sees whether it is their own build, another job or a stray loop.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace dldoctor::sample {

/// One process's CPU over the window.
struct CpuUser {
  int pid = 0;
  std::string comm;      ///< the command name of /proc/<pid>/stat
  std::string cmdline;   ///< its arguments joined by spaces, cut to a line; empty for a kernel
                         ///< thread or when unreadable
  double cpu_pct = 0.0;  ///< percent of one CPU (a process of two busy threads reads 200)
};

/// What one reading of /proc/<pid>/stat keeps: the process's identity and CPU ticks so far.
struct CpuReading {
  std::string comm;
  int64_t start_ticks = 0;  ///< a pid with another start time is another process
  int64_t cpu_ticks = 0;    ///< utime + stime, every thread
};

/// Every process's reading under `proc_root` (a process that cannot be read is left out).
std::unordered_map<int, CpuReading> read_cpu_readings(const std::string& proc_root);

/// The processes in both readings (same start time), by CPU used between them, most first:
/// at most `count`, each with at least `min_pct` of a CPU. `seconds` is the window,
/// `ticks_per_s` the clock tick rate. cmdline is left empty.
std::vector<CpuUser> rank_cpu_users(const std::unordered_map<int, CpuReading>& before,
                                    const std::unordered_map<int, CpuReading>& after,
                                    double seconds, double ticks_per_s, size_t count,
                                    double min_pct);

/// Reads every process, waits `window_s`, reads again and ranks (rank_cpu_users), with each
/// one's command line filled in. Empty when /proc cannot be listed.
std::vector<CpuUser> top_cpu_users(const std::string& proc_root, double window_s, size_t count,
                                   double min_pct);

}  // namespace dldoctor::sample
