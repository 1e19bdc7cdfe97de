// The raw record of a run for `--trace`: every event drained from the ring and the
// sampler's counters, kept as they came, up to a cap (a trace of hours at thousands of
// batches/s would not open anyway). What was left out is counted, so the trace can say so.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "dldoctor_core/sample/snapshot.hpp"
#include "dldoctor_core/trace/event.hpp"

namespace dldoctor::monitor {

/// Default cap on kept events (64 MiB of 64-byte records), and on kept counter samples.
inline constexpr size_t kDefaultTraceEvents = 1'000'000;

/// The machine's figures at one sampler pass.
struct MachineCounter {
  int64_t t_ns = 0;
  std::optional<double> cpu_busy_pct;
  std::optional<int64_t> shm_used_bytes;
  std::optional<int64_t> shm_total_bytes;
  std::optional<int64_t> mem_available_bytes;
};

/// One process's figures at one sampler pass.
struct ProcessCounter {
  int64_t t_ns = 0;
  int pid = 0;
  char state = '?';
  std::optional<double> cpu_pct;
};

/// One GPU's figures at one sampler pass.
struct GpuCounter {
  int64_t t_ns = 0;
  int index = 0;  ///< NVML's
  std::optional<double> utilization_pct;
  std::optional<int64_t> memory_used_bytes;
  std::optional<int64_t> job_memory_bytes;
};

/// Everything kept, copied out.
struct TraceContents {
  std::vector<trace::Event> events;  ///< in drain order (per writer, in time order)
  std::vector<MachineCounter> machine;
  std::vector<ProcessCounter> processes;
  std::vector<GpuCounter> gpus;
  uint64_t dropped_events = 0;    ///< events past the cap
  uint64_t dropped_counters = 0;  ///< counter samples past the cap
  size_t max_events = 0;
};

/// Keeps events and counters up to a cap. Thread-safe (one mutex per batch or pass).
class TraceStore {
 public:
  /// Keeps at most `max_events` events, and as many counter samples.
  explicit TraceStore(size_t max_events = kDefaultTraceEvents) : max_(max_events) {}
  /// Events drained from the ring.
  void ingest(const std::vector<trace::Event>& events);
  /// One sampler pass.
  void ingest(const sample::Snapshot& s);
  /// A copy of what is kept so far.
  TraceContents contents() const;

 private:
  mutable std::mutex mu_;
  size_t max_;
  TraceContents c_;
};

}  // namespace dldoctor::monitor
