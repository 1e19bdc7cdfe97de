// The live side of a watched run, all in C++ so it keeps going when the watched Python is
// stuck: a drain thread moves events from the shared ring into the analyzer, the sampler
// thread feeds it /proc snapshots, and both keep a short history for reports.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dldoctor_core/analyze/session.hpp"
#include "dldoctor_core/sample/sampler.hpp"
#include "dldoctor_core/system/facts.hpp"
#include "dldoctor_core/trace/ring.hpp"

namespace dldoctor::monitor {

/// Options of a Monitor.
struct MonitorOptions {
  double sample_interval_s = 0.1;  ///< /proc sampling period (DESIGN.md section 3)
  int drain_interval_ms = 20;      ///< how often the ring is drained into the analyzer
};

/// Owns a run's event ring (as its reader), the sampler and the analyzer session.
class Monitor {
 public:
  /// Creates the ring file at `ring_path` with room for `capacity` events.
  Monitor(const std::string& ring_path, uint32_t capacity, MonitorOptions opts);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  /// Starts sampling the tree under `root_pid` and draining the ring.
  void start(int root_pid);
  /// Stops both threads and drains what is left; idempotent.
  void stop();

  analyze::Session& session() { return session_; }
  trace::EventRing& ring() { return *ring_; }
  /// Events moved from the ring into the analyzer so far.
  uint64_t events_seen() const { return events_seen_.load(std::memory_order_relaxed); }
  /// Monotonic time of the last batch handed to a consumer, 0 before the first.
  int64_t last_batch_ns() const { return last_batch_ns_.load(std::memory_order_relaxed); }

 private:
  void drain_loop();
  size_t drain_once(std::vector<trace::Event>& buf);

  MonitorOptions opts_;
  std::unique_ptr<trace::EventRing> ring_;
  std::unique_ptr<sample::Sampler> sampler_;
  analyze::Session session_;
  std::thread drain_thread_;
  std::atomic<bool> running_{false};
  std::atomic<uint64_t> events_seen_{0};
  std::atomic<int64_t> last_batch_ns_{0};
  std::mutex drain_mutex_;
};

}  // namespace dldoctor::monitor
