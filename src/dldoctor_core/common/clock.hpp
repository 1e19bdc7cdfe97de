// One clock for every process of a job: CLOCK_MONOTONIC is system-wide, and Python's
// time.monotonic_ns() reads the same clock, so events from workers and samples line up.
#pragma once

#include <cstdint>
#include <ctime>

namespace dldoctor {

/// Nanoseconds on CLOCK_MONOTONIC.
inline int64_t now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// Nanoseconds on CLOCK_BOOTTIME: the clock of a process's start time in /proc/<pid>/stat.
inline int64_t boot_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// CPU time of the calling thread, in nanoseconds.
inline int64_t thread_cpu_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace dldoctor
