// The streaming analyzer of one job. Events (from the ring drain) and sampler passes arrive
// on other threads; findings can be asked for at any time, over the last ~10 s (the
// streaming verdict) or over the whole run (the final report). Memory stays bounded.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dldoctor_core/analyze/failure_log.hpp"
#include "dldoctor_core/analyze/gpu_track.hpp"
#include "dldoctor_core/analyze/loader_track.hpp"
#include "dldoctor_core/analyze/process_track.hpp"
#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/sample/snapshot.hpp"
#include "dldoctor_core/system/facts.hpp"
#include "dldoctor_core/trace/event.hpp"

namespace dldoctor::analyze {

/// Which stretch of the run findings() looks at.
enum class Window {
  kRecent,    ///< the last kRecentWindowNs: the streaming verdict while the job runs
  kWholeRun,  ///< everything since the first event: the final report
};

/// Length of the recent window. Long enough for a stable mean of a slow loader (a few
/// batches/s), short enough to name a steady bottleneck within 15 s of the first batch.
inline constexpr int64_t kRecentWindowNs = 10'000'000'000;

/// One worker of a loader, for the report table (and the straggler rule to come).
struct WorkerSummary {
  int worker = 0;  ///< id (-1: the main process, num_workers=0)
  int pid = 0;     ///< 0 unknown
  int64_t batches = 0;
  std::optional<double> fetch_mean_ms;
  std::optional<double> fetch_recent_p50_ms;  ///< over its newest 64 batches
  std::optional<double> on_cpu_fraction;
};

/// One loader over the whole run, for the report table.
struct LoaderSummary {
  uint16_t id = 0;
  LoaderConfig config;
  RankId rank;          ///< of its main process (unknown: a job without ranks)
  int rank_loader = 0;  ///< its number among its rank's loaders (0: no rank)
  int64_t epochs = 0;
  int64_t batches = 0;                         ///< handed to the consumer
  std::optional<double> batches_per_s;         ///< over the loop's own time (wait + step)
  std::optional<double> data_stall_pct;        ///< steady batches, % of the loop
  std::optional<double> getitem_p50_ms;        ///< per sample
  std::optional<double> getitem_p99_ms;        ///< per sample
  std::optional<double> collate_p50_ms;        ///< per batch
  std::optional<double> fetch_p50_ms;          ///< per batch
  std::optional<double> consumer_step_ms;      ///< mean
  std::optional<double> pin_memory_ms;         ///< mean per batch
  std::optional<double> batch_bytes;           ///< mean tensor bytes per batch
  std::optional<double> worker_on_cpu_fraction;
  std::optional<double> worker_cpu_pct;        ///< sampler, mean per worker
  std::optional<double> runq_delay_pct;        ///< sampler, mean per worker
  std::optional<double> read_mb_per_s;         ///< sampler, storage reads of all workers
  std::vector<int> worker_pids;
  std::vector<WorkerSummary> workers;
  std::optional<double> first_batch_latency_ms;            ///< first epoch
  std::vector<double> first_batch_latency_ms_per_epoch;    ///< newest 1024 epochs
  int64_t worker_exceptions = 0;
  int64_t worker_deaths = 0;
};

/// The analyzer of one job. Thread-safe: one mutex, held briefly per call.
class Session {
 public:
  /// Machine facts (from system::collect(), done by the caller).
  void set_facts(const system::Facts& facts);
  /// The storage behind the dataset, when the user named a data directory.
  void set_data_storage(const system::StorageFacts& storage);
  /// One event from the ring. O(1) amortized.
  void ingest(const trace::Event& e) noexcept;
  /// One sampler pass over the job's process tree.
  void ingest(const sample::Snapshot& s);
  /// Registers `pid` as worker `worker` of `loader` (kWorkerStart does this itself).
  void note_worker_pid(uint16_t loader, int worker, int pid, int64_t t_ns);
  /// Hot functions of a loader's fetch from one or more sampled profiles. Figures add up
  /// over calls (each call brings new profiles), per function (name and location).
  void add_hot_functions(uint16_t loader, std::vector<HotFunction> functions);
  /// A failure note from the side logs (worker death details, error texts, runtime facts,
  /// the job's memory cgroup, CUDA memory); kept bounded in a FailureLog.
  void note(FailureNote n);
  /// What the main process measured of a loader's dataset (attributes, pickled size).
  void note_dataset(uint16_t loader, DatasetNotes notes);
  /// A slow batch with its sample indices, from a worker's side log (newest kept).
  void note_slow_batch(uint16_t loader, SlowBatchNote note);
  /// The thread pools mapped into a process (read by the monitor once per worker).
  void note_thread_pools(int pid, sample::ThreadPools pools);
  /// The rank of `loader`'s main process (from the side log's iter_start record).
  void note_rank(uint16_t loader, RankId rank);
  /// Findings about a loader of a known rank carry that rank, and their title names it
  /// ("Rank 1 · loader 1: ..." for "Loader 3: ..."); the others are left as they are.
  void label_ranks(std::vector<report::Finding>& findings) const;
  /// The rank `loader`'s main process shows (RankId::shown), -1 when none is known.
  int rank_of(uint16_t loader) const;
  /// torch.get_num_threads() as a worker reported it.
  void note_torch_threads(int pid, int threads);
  /// Whether `pid` is known as a DataLoader worker (from its events).
  bool is_worker(int pid) const;

  /// Findings over `w`, most important first. now_ns = 0: the newest time seen.
  std::vector<report::Finding> findings(int64_t now_ns, Window w) const;
  /// The same, and in `not_healthy` why the window cannot be called healthy should no
  /// finding be critical ("" when it can: data_bound's not_healthy_note()), from the same
  /// view.
  std::vector<report::Finding> findings(int64_t now_ns, Window w, std::string& not_healthy) const;
  /// The figures the rules see (for tests and the live view).
  JobView view(int64_t now_ns, Window w) const;
  /// The id of the most important critical finding, else "healthy".
  static std::string verdict(const std::vector<report::Finding>& findings);
  /// Per-loader figures over the whole run, by loader id.
  std::vector<LoaderSummary> loaders() const;
  /// Newest timestamp seen on an event or a pass (0: none yet).
  int64_t latest_ns() const;
  /// Events ingested so far.
  int64_t events() const;
  /// Whether any DataLoader was seen (an event of it).
  bool any_loader() const;

 private:
  struct WorkerPid {
    uint16_t loader = 0;
    int worker = 0;
    int64_t first_ns = 0;
    int64_t last_ns = 0;
    bool exited = false;
    int64_t samples = 0;  ///< fetched so far, all its batches
  };
  static constexpr size_t kMaxWorkerPids = 65536;  ///< registry bound (a run of many epochs)
  static constexpr size_t kMaxMemoryPids = 2048;   ///< processes with a memory series
  static constexpr size_t kMaxMemoryPoints = 32;   ///< per process; thinned when full
  static constexpr size_t kMaxSlowNotes = 64;      ///< per loader, newest kept

  void touch_worker_locked(uint16_t loader, int worker, int pid, int64_t t_ns, bool exited);
  JobView view_locked(int64_t now_ns, Window w) const;
  /// Worker pids of `loader` (all loaders when empty) alive at some point in [from, to].
  std::vector<int> worker_pids_locked(std::optional<uint16_t> loader, int64_t from,
                                      int64_t to) const;
  std::optional<int> peak_workers_locked(int64_t from, int64_t to) const;
  /// `loader`'s number among the loaders of its rank (1 first), 0 when its rank is unknown.
  int rank_loader_locked(uint16_t loader) const;

  mutable std::mutex mu_;
  system::Facts facts_;
  std::optional<system::StorageFacts> storage_;
  std::map<uint16_t, LoaderTrack> loaders_;
  ProcessTrack procs_;
  GpuTrack gpu_;
  std::unordered_map<int, WorkerPid> worker_pids_;
  std::map<uint16_t, std::vector<HotFunction>> hot_;
  FailureLog failures_;
  std::unordered_map<int, std::vector<MemoryPoint>> memory_;  ///< pid -> fresh smaps reads
  std::map<uint16_t, DatasetNotes> datasets_;
  std::map<uint16_t, std::vector<SlowBatchNote>> slow_notes_;
  std::unordered_map<int, WorkerPools> pools_;
  std::map<uint16_t, RankId> ranks_;  ///< loader -> its main process's rank
  int64_t first_ns_ = 0;
  int64_t latest_ns_ = 0;
  int64_t events_ = 0;
};

}  // namespace dldoctor::analyze
