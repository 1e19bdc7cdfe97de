// What the analyzer remembers about one DataLoader from its events: the configuration of
// its latest iterator, running totals for the whole run, per-second sums and the newest
// batches for the recent window, per-worker batch times and per-epoch first-batch latency.
// Memory is bounded whatever the length of the run.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "dldoctor_core/analyze/pipeline_fill.hpp"
#include "dldoctor_core/analyze/window_stats.hpp"
#include "dldoctor_core/trace/event.hpp"

namespace dldoctor::analyze {

/// A loader's configuration, from its latest kIterStart.
struct LoaderConfig {
  bool known = false;                   ///< false until a kIterStart was seen
  int num_workers = 0;                  ///< inferred from worker ids seen when !known
  std::optional<int> batch_size;        ///< empty: batch_size=None or unknown
  std::optional<int> prefetch_factor;   ///< empty: n/a (num_workers=0) or unknown
  uint8_t flags = 0;                    ///< trace::LoaderFlags
  std::optional<int64_t> timeout_ms;
  int main_pid = 0;                     ///< 0 unknown
  trace::StartMethod start_method = trace::StartMethod::kUnknown;

  bool pin_memory() const noexcept { return flags & trace::kPinMemory; }
  bool persistent_workers() const noexcept { return flags & trace::kPersistentWorkers; }
  bool in_order() const noexcept { return flags & trace::kInOrder; }
  bool iterable_dataset() const noexcept { return flags & trace::kIterableDataset; }
  bool drop_last() const noexcept { return flags & trace::kDropLast; }
  bool custom_collate() const noexcept { return flags & trace::kCustomCollate; }
};

/// Bit of Event::flags on kWorkerBatch: the fetch ran under the sampling profiler and is
/// about twice as slow as usual (trace::kProfiled). Such batches count, but their
/// times would skew every fetch figure, so they are left out of them.
inline constexpr uint8_t kProfiledFetch = 1 << 0;

/// A batch counts as waited for when its wait is at least this share of its loop time
/// (wait + step): the same cut as the data-stall gate, applied to one batch.
inline constexpr double kWaitedBatchShare = 0.05;

/// Waits shorter than this are not searched for head-of-line blocking: a queue hand-off
/// alone takes tens of microseconds, and a batch that overtakes another by that little
/// says nothing about a straggler.
inline constexpr int64_t kHolMinWaitNs = 1'000'000;

/// Sums over the main process's batches.
struct MainSums {
  int64_t batches = 0;   ///< handed out
  int64_t stepped = 0;   ///< batches with a known consumer step (not start-up's)
  int64_t wait_ns = 0;   ///< blocked time of the stepped batches
  int64_t step_ns = 0;   ///< consumer time of the stepped batches
  int64_t waited = 0;         ///< stepped batches the consumer waited for (kWaitedBatchShare)
  int64_t waited_step_ns = 0; ///< consumer time of those: its pace while the loader lagged
  /// Blocked time of the hand-outs that fill the pipeline (PipelineFill): worker start-up.
  int64_t first_wait_ns = 0;
  int64_t pin_ns = 0;
  int64_t pinned = 0;
  /// Blocked time of the stepped batches during which a later batch was already fetched:
  /// in-order delivery held the loop behind a straggler (head-of-line blocking).
  int64_t hol_ns = 0;
  int64_t hol_batches = 0;  ///< stepped batches with some head-of-line wait
  /// Batches the workers had finished and the consumer not yet taken, at each hand-out: the
  /// queues between them (shared memory, the pin-memory thread's, the reorder buffer), all
  /// pinned copies once the pin-memory thread has them. Summed, and the most at once.
  int64_t ready_sum = 0;
  int64_t ready_max = 0;
  /// Stepped batches that waited kHolMinWaitNs or more and whose worker's fetch end is known,
  /// and the part of those waits after the batch was made: the hand-over itself (the queue,
  /// the unpickle, the pin), measured rather than taken from the quickest waits.
  int64_t made_known = 0;
  int64_t made_wait_ns = 0;
  /// Blocked time of the stepped batches handed out after a worker of their epoch had run
  /// out of data (kWorkerDrained): the loop's wait while it went on short-handed.
  int64_t short_wait_ns = 0;
  MainSums& operator+=(const MainSums& o) noexcept {
    batches += o.batches; stepped += o.stepped; wait_ns += o.wait_ns; step_ns += o.step_ns;
    waited += o.waited; waited_step_ns += o.waited_step_ns;
    first_wait_ns += o.first_wait_ns; pin_ns += o.pin_ns; pinned += o.pinned;
    hol_ns += o.hol_ns; hol_batches += o.hol_batches;
    ready_sum += o.ready_sum; ready_max = ready_max > o.ready_max ? ready_max : o.ready_max;
    made_known += o.made_known; made_wait_ns += o.made_wait_ns;
    short_wait_ns += o.short_wait_ns;
    return *this;
  }
};

/// Sums over the workers' batches.
struct WorkerSums {
  int64_t batches = 0;         ///< all batches, profiled ones included
  int64_t timed = 0;           ///< batches whose times are in the sums below
  int64_t samples = 0;         ///< of the timed batches
  int64_t fetch_ns = 0;
  int64_t collate_ns = 0;
  int64_t cpu_ns = 0;          ///< of the batches whose thread CPU time is known
  int64_t cpu_fetch_ns = 0;    ///< fetch time of those same batches
  int64_t bytes = 0;
  int64_t bytes_batches = 0;   ///< batches whose tensor bytes are known
  WorkerSums& operator+=(const WorkerSums& o) noexcept {
    batches += o.batches; timed += o.timed; samples += o.samples; fetch_ns += o.fetch_ns;
    collate_ns += o.collate_ns; cpu_ns += o.cpu_ns; cpu_fetch_ns += o.cpu_fetch_ns;
    bytes += o.bytes; bytes_batches += o.bytes_batches;
    return *this;
  }
};

/// One worker batch, as kept for percentiles.
struct WorkerBatchRecord {
  int64_t t_end_ns = 0;
  int64_t fetch_ns = 0;
  int64_t collate_ns = 0;
  uint32_t samples = 0;
  int32_t index = -1;   ///< batch index in its epoch (-1 unknown)
  int16_t worker = -1;  ///< worker id (-1: the main process)
  int32_t epoch = 0;    ///< the loader's epoch it belongs to (0 unknown)
};

/// One iterator (epoch) of a loader.
/// A worker whose share of an IterableDataset ran out while its epoch went on.
struct DrainedWorker {
  int worker = -1;
  int64_t t_ns = 0;     ///< when its fetch raised StopIteration
  int64_t batches = 0;  ///< batches it fetched in the epoch before that
};

struct EpochRecord {
  int64_t start_ns = 0;
  std::optional<int64_t> first_batch_latency_ns;  ///< iterator created → first batch handed out
  /// The consumer's waits for the other workers' first batches (PipelineFill): the rest of
  /// the start-up when the workers come up one after the other (spawn).
  int64_t later_workers_wait_ns = 0;
  int64_t batches = 0;
  std::optional<int64_t> end_ns;
  int64_t last_batch_ns = 0;  ///< last batch handed out (0: none yet)
  int num_workers = 0;
  uint8_t flags = 0;          ///< trace::LoaderFlags of its iterator
  int64_t ordinal = 0;        ///< the loader's epoch number (1 = first iterator)
  std::vector<DrainedWorker> drained;  ///< each worker once, in the order they ran out
};

/// Per worker id: batch times kept for straggler and startup rules.
struct WorkerTrack {
  int pid = 0;
  int64_t batches = 0;
  int64_t timed = 0;  ///< batches in fetch_ns (profiled fetches are not)
  int64_t fetch_ns = 0;
  int64_t cpu_ns = 0;
  int64_t cpu_fetch_ns = 0;
  int64_t samples = 0;       ///< of the timed batches
  int64_t max_fetch_ns = 0;  ///< slowest timed batch
  Ring<int64_t, 64> recent_fetch_ns;
  Ring<int64_t, 64> recent_end_ns;  ///< fetch end of each of recent_fetch_ns, same order
  Reservoir<int64_t> fetch_sample{256};  ///< whole-run sample of its fetch times
};

/// All the event-derived state of one loader.
class LoaderTrack {
 public:
  static constexpr size_t kRecentSeconds = 32;   ///< > the 10 s window plus late events
  static constexpr size_t kRecentBatches = 4096; ///< the newest batches kept for percentiles
  static constexpr size_t kReservoir = 4096;     ///< whole-run percentile sample
  static constexpr size_t kWaitSample = 1024;    ///< whole-run sample of the consumer's waits
  static constexpr size_t kMaxEpochs = 1024;     ///< epochs kept (the oldest are dropped)
  static constexpr size_t kSlowest = 16;         ///< slowest batches of the run kept
  static constexpr size_t kMaxDrained = 1024;    ///< run-out workers kept per epoch
  /// Finished batches remembered for head-of-line blocking: more than the batches in flight
  /// (workers x prefetch_factor) of any sane loader.
  static constexpr size_t kDoneBatches = 256;

  LoaderTrack() : reservoir_(kReservoir) {}

  void on_iter_start(const trace::Event& e) noexcept;
  void on_iter_end(const trace::Event& e) noexcept;
  void on_worker_batch(const trace::Event& e) noexcept;
  void on_main_batch(const trace::Event& e) noexcept;
  /// `n` fetches of `worker` (-1: the main process) that no kWorkerBatch stood for: the
  /// tail of a sampled stream, from kWorkerExit / kIterEnd. They count as batches only.
  void on_unmeasured_fetches(int worker, int64_t n) noexcept;
  /// kWorkerDrained: the worker's share of the epoch's data ran out (first time counts).
  void on_worker_drained(const trace::Event& e);
  void on_worker_exception() noexcept { ++exceptions_; }
  void on_worker_died() noexcept { ++deaths_; }

  /// Configuration of the latest iterator (num_workers inferred when none was seen).
  LoaderConfig config() const noexcept;
  const MainSums& main_total() const noexcept { return main_total_; }
  const WorkerSums& worker_total() const noexcept { return worker_total_; }
  MainSums main_between(int64_t from_ns, int64_t to_ns) const noexcept {
    return main_recent_.sum(from_ns, to_ns);
  }
  WorkerSums worker_between(int64_t from_ns, int64_t to_ns) const noexcept {
    return worker_recent_.sum(from_ns, to_ns);
  }
  /// Batches whose fetch ended at or after `from_ns` (newest kRecentBatches at most);
  /// from_ns < 0: the whole-run reservoir.
  std::vector<WorkerBatchRecord> worker_batches_since(int64_t from_ns) const;
  const std::map<int, WorkerTrack>& workers() const noexcept { return workers_; }
  const std::vector<EpochRecord>& epochs() const noexcept { return epochs_; }
  int64_t epochs_started() const noexcept { return epochs_started_; }
  int64_t exceptions() const noexcept { return exceptions_; }
  int64_t deaths() const noexcept { return deaths_; }
  /// Time span of the main process's batches: first asked .. last handed out.
  std::optional<int64_t> first_batch_ns() const noexcept { return first_main_ns_; }
  std::optional<int64_t> last_batch_ns() const noexcept { return last_main_ns_; }
  /// Whole-run sample of the consumer's waits (ns) for batches that followed a step.
  const Reservoir<int64_t>& wait_sample() const noexcept { return wait_sample_; }
  /// Whole-run sample of the measured hand-overs (ns): the part of a wait after its batch's
  /// fetch ended (MainSums::made_wait_ns, one at a time), for their median: a few waits
  /// stretched by a stalled host raise the mean, not the median.
  const Reservoir<int64_t>& handover_sample() const noexcept { return handover_sample_; }
  /// The slowest timed batches of the whole run, slowest first.
  const std::vector<WorkerBatchRecord>& slowest() const noexcept { return slowest_; }
  /// The main process's pid as seen on its events (0 unknown).
  int main_pid() const noexcept { return config_.main_pid ? config_.main_pid : main_event_pid_; }

 private:
  LoaderConfig config_;
  MainSums main_total_;
  WorkerSums worker_total_;
  SecondBuckets<MainSums, kRecentSeconds> main_recent_;
  SecondBuckets<WorkerSums, kRecentSeconds> worker_recent_;
  Ring<WorkerBatchRecord, kRecentBatches> recent_batches_;
  Reservoir<WorkerBatchRecord> reservoir_;
  Reservoir<int64_t> wait_sample_{kWaitSample};
  Reservoir<int64_t> handover_sample_{kWaitSample};
  std::map<int, WorkerTrack> workers_;
  std::vector<EpochRecord> epochs_;
  int64_t epochs_started_ = 0;
  int64_t exceptions_ = 0;
  int64_t deaths_ = 0;
  bool awaiting_first_batch_ = false;
  struct DoneBatch {
    int32_t index = -1;
    int64_t t_end_ns = 0;
    uint32_t generation = 0;
  };
  Ring<DoneBatch, kDoneBatches> done_;
  uint32_t generation_ = 0;  ///< one per iterator (batch indices restart)
  int64_t done_in_iter_ = 0;    ///< worker batches finished since the iterator started
  int64_t handed_in_iter_ = 0;  ///< batches handed to the consumer since then
  int32_t epoch_ordinal_ = 0;
  PipelineFill fill_;
  std::vector<WorkerBatchRecord> slowest_;
  std::optional<int64_t> first_main_ns_, last_main_ns_;
  int main_event_pid_ = 0;
};

}  // namespace dldoctor::analyze
