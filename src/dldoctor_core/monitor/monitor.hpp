// The live side of a watched run, all in C++ so it keeps going when the watched Python is
// stuck: a drain thread moves events from the shared ring into the analyzer, the sampler
// thread feeds it /proc snapshots, and both keep a short history for reports.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "dldoctor_core/analyze/session.hpp"
#include "dldoctor_core/analyze/verdict.hpp"
#include "dldoctor_core/monitor/series.hpp"
#include "dldoctor_core/monitor/trace_store.hpp"
#include "dldoctor_core/sample/sampler.hpp"
#include "dldoctor_core/system/facts.hpp"
#include "dldoctor_core/trace/ring.hpp"
#include "dldoctor_core/watchdog/watchdog.hpp"

namespace dldoctor::monitor {

/// Options of a Monitor.
struct MonitorOptions {
  double sample_interval_s = 0.1;  ///< /proc sampling period (DESIGN.md section 3)
  /// How often the drain thread moves the ring's events into the analyzer. The ring holds
  /// seconds of the busiest stream (its writers sample past 500 batches/s), the rules read
  /// windows of seconds and the hang doctor times out in seconds, so a tenth of a second
  /// costs them nothing; a reader that needs the counts of this instant (the live view,
  /// `tune`'s rates) calls catch_up(). Every wake-up is the watcher's CPU taken from the job
  /// it watches: at 20 ms, 50 a second, ~2 ms of a core a second on a tiny-batch loader.
  int drain_interval_ms = 100;
  std::string run_dir;             ///< where the job's processes dump their stacks
  std::optional<double> hang_timeout_s;  ///< --hang-timeout; empty: adaptive (>= 60 s)
  size_t trace_max_events = 0;  ///< > 0: keep raw events and counters for --trace, this many
};

/// What the main process told the side log about a loader (strings the ring cannot carry).
struct LoaderNotes {
  std::string collate_fn;       ///< qualname when custom, "" for torch's default
  std::string worker_init_fn;   ///< qualname, "" none
  std::optional<int> main_threads;  ///< Python threads alive when its workers started
  std::vector<std::string> main_thread_names;
};

/// Owns a run's event ring (as its reader), the sampler and the analyzer session.
class Monitor {
 public:
  /// Creates the ring file at `ring_path` with room for `capacity` events; an empty
  /// `ring_path`: the ring in memory (EventRing::create_in_memory), its path ring().path().
  Monitor(const std::string& ring_path, uint32_t capacity, MonitorOptions opts);
  ~Monitor();
  Monitor(const Monitor&) = delete;
  Monitor& operator=(const Monitor&) = delete;

  /// Starts sampling the tree under `root_pid` and draining the ring.
  void start(int root_pid);
  /// Stops both threads and drains what is left; idempotent.
  void stop();

  /// Machine facts as the watcher sees them; the CPUs are narrowed to the job's own
  /// affinity once its main process is known (a job may pin itself with taskset or
  /// sched_setaffinity, and the watcher's affinity says nothing about that).
  void set_facts(const system::Facts& facts);
  /// Strings about a loader from the side log, for the hang doctor's context.
  void set_loader_notes(uint16_t loader, LoaderNotes notes);
  /// Hangs seen so far; the newest capture and its findings (empty before the first).
  int hangs() const { return watchdog_ ? watchdog_->hangs() : 0; }
  std::optional<watchdog::HangSnapshot> last_hang() const;
  std::vector<report::Finding> last_hang_findings() const;
  /// The hang timeout in force now (adaptive unless overridden).
  double hang_timeout_s() const { return watchdog_ ? watchdog_->timeout_s() : 0; }

  /// The report over `w`, decided: the session's findings, with the newest hang's merged in
  /// over the whole run (analyze::with_hang), ordered, and the verdict.
  analyze::Decision decide(analyze::Window w) const;

  analyze::Session& session() { return session_; }
  /// The run over time (HTML report, live view).
  const SeriesRecorder& series() const { return series_; }
  /// The raw events and counters for --trace; null unless trace_max_events > 0.
  const TraceStore* trace_store() const { return trace_.get(); }
  trace::EventRing& ring() { return *ring_; }
  /// Moves what the ring holds now into the analyzer (the drain thread does so every
  /// drain_interval_ms): for a reader of this instant's counts, and stop()'s last drain.
  void catch_up();
  /// Events moved from the ring into the analyzer so far.
  uint64_t events_seen() const { return events_seen_.load(std::memory_order_relaxed); }
  /// Monotonic time of the last batch handed to a consumer, 0 before the first.
  int64_t last_batch_ns() const { return last_batch_ns_.load(std::memory_order_relaxed); }

 private:
  void drain_loop();
  void note_main_pid(int pid);
  void track_locked(const trace::Event& e);
  watchdog::WatchState watch_state();

  /// What the hang doctor needs to know of a loader, kept from its events.
  struct LoaderLive {
    bool active = false;
    int64_t iter_start_ns = 0;
    int main_pid = 0;
    int num_workers = 0;
    int64_t start_method = 0;
    int64_t timeout_ms = 0;
    int64_t epoch = 0;
    int64_t last_main_index = -1;  ///< of the measured hand-outs (the ring's progress: all)
    std::map<int, int> worker_pids;      // worker id -> pid (this epoch)
    std::map<int, int64_t> returned;     // worker id -> batches returned (this epoch)
    std::map<int, std::pair<std::optional<int>, std::optional<int>>> died;  // code, signal
    LoaderNotes notes;
  };
  size_t drain_once(std::vector<trace::Event>& buf);
  /// Reads the thread pools of workers whose threads compete (sampler thread).
  void probe_pools(const sample::Snapshot& s);

  /// The sampler's whole CPU budget, % of one core (DESIGN.md section 6).
  static constexpr double kSamplerBudgetPct = 1.0;
  /// A worker's first smaps_rollup read waits until it is this old (Monitor::start).
  static constexpr int64_t kWorkerSmapsMinAgeNs = 2'000'000'000;
  /// Worker pids whose pools are read at most (maps and environ: ~0.4 ms a worker).
  static constexpr size_t kMaxProbed = 4096;
  std::unordered_set<int> probed_;  // pids whose pools were read; sampler thread only

  MonitorOptions opts_;
  std::unique_ptr<trace::EventRing> ring_;
  std::unique_ptr<sample::Sampler> sampler_;
  analyze::Session session_;
  SeriesRecorder series_;
  std::unique_ptr<TraceStore> trace_;  // set in the constructor, never replaced
  std::thread drain_thread_;
  std::atomic<bool> running_{false};
  std::mutex wake_mutex_;             // with wake_: stop() ends the drain thread's wait
  std::condition_variable wake_;
  std::atomic<uint64_t> events_seen_{0};
  std::atomic<int64_t> last_batch_ns_{0};
  std::mutex drain_mutex_;
  system::Facts facts_;       // guarded by drain_mutex_
  std::vector<int> main_pids_;  // main processes whose affinity was read; drain_mutex_
  mutable std::mutex live_mutex_;
  std::map<uint16_t, LoaderLive> live_;  // guarded by live_mutex_
  std::unique_ptr<watchdog::Watchdog> watchdog_;
};

}  // namespace dldoctor::monitor
