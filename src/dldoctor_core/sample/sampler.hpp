// The /proc sampler of a process tree: one pass reads every process of the tree (root first,
// then its descendants) and the machine, turns counters into rates against the previous pass,
// and keeps a bounded history. It runs on its own thread, never touches Python, and reports
// what each pass cost in thread CPU time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "dldoctor_core/sample/snapshot.hpp"

namespace dldoctor::sample {

/// How a Sampler samples.
struct SamplerOptions {
  int64_t interval_ns = 100'000'000;  ///< between the starts of two passes
  int smaps_every = 10;   ///< smaps_rollup, status (context switches) and io are read every
                          ///< Nth pass of a process (smaps_rollup up to every 8N-th while
                          ///< the process's private memory stays flat: ProcessReader::
                          ///< smaps_backoff), its fd count and the wait channel of a
                          ///< sleeper every 5N-th; /proc/stat, meminfo, /dev/shm, swap, PSI and
                          ///< the /proc listing (new members) every Nth pass; between, the last
                          ///< values (and rates over the last such window) are repeated
  double smaps_budget_pct = 0.05; ///< smaps_rollup walks every mapped page (~0.4 ms for a forked
                                  ///< python worker, ~4 ms for a process that imported torch):
                                  ///< its reads may use at most this % of one core on average,
                                  ///< so large trees are read less often than every smaps_every
                                  ///< passes (64 such python workers: each about every 50 s; 4:
                                  ///< every 3 s); <= 0: no cap
  double total_budget_pct = 0;  ///< > 0: the whole sampler's CPU budget (% of one core); the
                                ///< smaps_rollup reads may then use what the passes leave of
                                ///< it (never less than smaps_budget_pct): a small tree gets
                                ///< its memory read every second or two, which a copy-on-write
                                ///< growth over samples needs, while a 64-worker tree stays
                                ///< within the same total; 0: smaps_budget_pct alone
  bool smaps_preferred_only = false;  ///< read smaps_rollup only of the processes the
                                      ///< set_smaps_priority callback prefers (a watched or
                                      ///< attached job: its workers' memory is the series a
                                      ///< rule reads, and a walk stalls the process walked)
  int64_t smaps_min_age_ns = 0;  ///< a process's first smaps_rollup read waits until it has
                                 ///< existed this long (see Monitor::start: a loader whose
                                 ///< workers live about a second each epoch); 0: read at once
  bool threads = false;   ///< fill ProcessSample::threads
  bool gpus = false;      ///< read the GPUs through NVML every pass (their process lists, to
                          ///< find the tree's processes, every smaps_every-th pass)
  size_t capacity = 600;  ///< snapshots kept in the history ring (a minute at 10 Hz)
  int max_kept_fds = -1;  ///< /proc descriptors kept open between passes; -1: a quarter of
                          ///< the soft RLIMIT_NOFILE, at most 1024 (the rest are opened per read)
};

/// Samples a process tree (and extra roots) periodically or on demand. Thread-safe.
class Sampler {
 public:
  /// A sampler of `root_pid` and its descendants; throws dldoctor::Error when the pid does not
  /// exist or an option is out of range.
  explicit Sampler(int root_pid, SamplerOptions options = {});
  ~Sampler();
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  /// Also samples `pid` and its descendants (after the first root's tree); throws
  /// dldoctor::Error when the pid does not exist.
  void add_root(int pid);

  /// Starts the sampling thread; does nothing when it runs already.
  void start();
  /// Stops and joins the sampling thread; returns within about one pass. Called from the
  /// callback, it only asks the thread to end (joined by a later stop() or the destructor).
  void stop();
  /// Whether the sampling thread runs.
  bool running() const;

  /// Takes one pass now, on the calling thread, and records it in the history (the callback is
  /// not called for it).
  Snapshot sample_once();

  /// The newest snapshot, empty before the first pass.
  std::optional<Snapshot> latest() const;
  /// The newest `max` snapshots (all kept when 0), oldest first.
  std::vector<Snapshot> history(size_t max = 0) const;

  /// Called on the sampling thread after each of its passes, with no lock held; keep it cheap.
  /// An exception it throws is swallowed (the sampler goes on). An empty function removes it.
  void set_callback(std::function<void(const Snapshot&)> callback);

  /// Processes for which `first(pid)` is true have their smaps_rollup read before the others
  /// when the budget cannot read all that are due (the analyzer wants its DataLoader
  /// workers' memory most). Called on the sampling thread; keep it cheap. Empty: none.
  void set_smaps_priority(std::function<bool(int)> first);

  /// Passes taken so far (thread and sample_once).
  uint64_t samples_taken() const;
  /// Thread CPU time of all passes so far, in nanoseconds.
  int64_t cost_ns_total() const;
  /// The options in effect.
  const SamplerOptions& options() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dldoctor::sample
