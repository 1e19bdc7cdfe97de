// What the job's processes report about failures beside the event stream: worker deaths with
// their reason (exit code or signal, torch's message, OOM-kill counters, the tail of the
// worker's stderr), error texts (shared memory full, too many open files, CUDA out of
// memory), the runtime facts the failure rules need (sharing strategy, the job's fd limit,
// pin_memory without an accelerator, the job's memory cgroup) and CUDA memory per step.
// The Python watcher turns side-log records into these notes; the Session keeps them in a
// FailureLog, bounded whatever the length of the run.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "dldoctor_core/trace/event.hpp"

namespace dldoctor::analyze {

/// A worker seen dead by the main process: from a kWorkerDied event, completed by its
/// side-log record (the two are merged by pid, else by loader and worker id).
struct WorkerDeath {
  int loader = -1;               ///< -1 unknown
  int worker = -1;               ///< worker id, -1 unknown
  int pid = 0;                   ///< 0 unknown
  std::optional<int> exit_code;  ///< set when it exited
  std::optional<int> signal;     ///< set when a signal killed it
  std::string message;           ///< torch's error text in the main process
  std::string stderr_tail;       ///< its last Python-level writes to stderr
  /// OOM kills in the job's memory cgroup between its loader's start and the death (the
  /// counter's rise; empty when unreadable).
  std::optional<int64_t> cgroup_oom_kills;
  std::optional<int64_t> machine_oom_kills;   ///< the same, machine-wide (/proc/vmstat)
  std::optional<int64_t> cgroup_limit_bytes;  ///< the job's memory cgroup at the death
  std::optional<int64_t> cgroup_usage_bytes;
  std::optional<int64_t> cgroup_peak_bytes;  ///< highest usage the cgroup recorded
  std::optional<int64_t> rss_peak_bytes;     ///< the worker's, as the sampler saw it
  int64_t t_ns = 0;                          ///< CLOCK_MONOTONIC, 0 unknown
};

/// Where an error text was seen.
enum class ErrorSource {
  kWorker,       ///< raised in a worker's fetch (it reaches the main process re-raised)
  kQueueFeeder,  ///< a worker could not send a batch: printed, the batch lost, main waits
  kLoader,       ///< raised to the main process out of the DataLoader's iterator
  kUncaught,     ///< ended the main process (sys.excepthook)
};

/// One error text (identical ones, by source and text, are folded with a count).
struct ErrorNote {
  ErrorSource source = ErrorSource::kWorker;
  int loader = -1;
  int worker = -1;
  int pid = 0;
  std::string type;     ///< e.g. "builtins.RuntimeError"
  std::string message;  ///< first few KiB
  int64_t count = 1;
  int64_t t_ns = 0;
  /// CUDA figures at the error, when CUDA was initialized (an uncaught CUDA OOM).
  std::optional<int64_t> cuda_peak_bytes, cuda_total_bytes;
  /// A fetch's exception (kWorker): the batch it was fetching, by its index in the epoch
  /// (-1 unknown), the epoch (0 unknown) and the dataset indices of its samples (at most
  /// kMaxSamples; empty when unknown or not indices: an IterableDataset), and the Python
  /// traceback (its newest kMaxTraceback characters).
  int index = -1;
  int64_t epoch = 0;
  std::vector<int64_t> samples;
  std::string traceback;
  static constexpr size_t kMaxSamples = 64;
  static constexpr size_t kMaxTraceback = 8192;
};

/// Facts of the job's main process at a loader's iterator start.
struct RuntimeNote {
  int loader = -1;
  int pid = 0;
  std::string sharing_strategy;        ///< torch.multiprocessing's; "" unknown
  std::optional<int64_t> nofile_soft;  ///< the job's RLIMIT_NOFILE; empty unknown
  std::optional<int64_t> nofile_hard;
  bool nofile_unlimited = false;
  std::optional<bool> pin_memory_requested;  ///< the loader's pin_memory argument
  std::optional<bool> accelerator;           ///< torch.accelerator.is_available()
  /// Only this process's limits (a worker that changed its own, or /proc/<pid>/limits read
  /// at an error it printed), not a loader's main-process facts.
  bool process_only = false;
  int64_t t_ns = 0;
};

/// The job's memory cgroup, read while it runs.
struct CgroupMemoryNote {
  std::optional<int64_t> limit_bytes;  ///< empty: unlimited or unknown
  std::optional<int64_t> usage_bytes;
  std::optional<int64_t> peak_bytes;
  int64_t t_ns = 0;
};

/// CUDA memory of the main process's device, read between steps.
struct CudaMemoryNote {
  int loader = -1;
  int device = 0;
  std::optional<int> batch_size;           ///< empty: the loader's configured batch size
  int64_t peak_bytes = 0;                  ///< torch.cuda.max_memory_allocated
  std::optional<int64_t> allocated_bytes;  ///< memory_allocated between steps (weights, state)
  std::optional<int64_t> reserved_bytes;
  std::optional<int64_t> total_bytes;
  int64_t t_ns = 0;
};

/// One note for Session::note().
using FailureNote =
    std::variant<WorkerDeath, ErrorNote, RuntimeNote, CgroupMemoryNote, CudaMemoryNote>;

/// What an error text says about its cause.
enum class ErrorKind {
  kOther,
  kShmNoSpace,        ///< shared memory (/dev/shm) full: "No space left on device", bus error
  kTooManyOpenFiles,  ///< EMFILE, or fd passing that failed ("received 0 items of ancdata")
  kCudaOom,           ///< torch.OutOfMemoryError / "CUDA out of memory"
};

/// Classifies an exception by its type name and text.
ErrorKind classify_error(std::string_view type, std::string_view message) noexcept;

/// The line of an error text that names its cause (for kind: "... No space left on device
/// (28)", "... Too many open files (24)", "CUDA out of memory ..."), else its last non-empty
/// line; at most 300 characters. A worker's exception re-raised in the main process carries
/// the whole worker traceback, of which this is the line that matters.
std::string error_line(std::string_view message, ErrorKind kind);

/// CUDA memory figures per device and batch size.
struct CudaPeak {
  int loader = -1;
  int device = 0;
  int batch_size = 0;
  int64_t peak_bytes = 0;                 ///< highest seen at this batch size
  std::optional<int64_t> baseline_bytes;  ///< lowest allocated between steps
  std::optional<int64_t> total_bytes;
  int64_t t_ns = 0;
};

/// What the failure rules see over one window.
struct FailureView {
  std::vector<WorkerDeath> deaths;                ///< oldest first
  std::vector<ErrorNote> errors;                  ///< oldest first
  std::vector<RuntimeNote> runtime;               ///< the newest per loader
  std::vector<RuntimeNote> process_limits;        ///< the newest per process (process_only)
  std::optional<CgroupMemoryNote> cgroup_memory;  ///< the least headroom seen in the window
  std::vector<CudaPeak> cuda;                     ///< per (loader, device, batch size)

  /// The job's runtime facts from any loader (the newest); null when none was noted.
  const RuntimeNote* job_runtime() const noexcept;
  /// Runtime facts of `loader`, else null.
  const RuntimeNote* runtime_of(int loader) const noexcept;
  /// The newest RLIMIT_NOFILE known for process `pid` (its own note, else the facts of a
  /// loader it started), else null.
  const RuntimeNote* limits_of(int pid) const noexcept;
};

/// The notes of one run, bounded.
class FailureLog {
 public:
  static constexpr size_t kMaxDeaths = 256;  ///< a crash loop respawning workers stays bounded
  static constexpr size_t kMaxErrors = 64;   ///< distinct texts; repeats only count
  static constexpr size_t kMaxCuda = 64;     ///< (loader, device, batch size) entries
  /// Processes with their own limits noted: a worker changes its own limit rarely, and an
  /// error's process is read once per distinct text.
  static constexpr size_t kMaxProcessLimits = 256;

  /// A kWorkerDied event (exit code or signal and pid from the main process's hook).
  void on_death_event(const trace::Event& e);
  void note(FailureNote n);
  /// Notes in [from_ns, to_ns]; from_ns < 0: the whole run. Runtime facts are always in.
  FailureView view(int64_t from_ns, int64_t to_ns) const;

 private:
  void add_death(WorkerDeath d);
  void add_error(ErrorNote e);
  void add_cuda(const CudaMemoryNote& c);

  std::vector<WorkerDeath> deaths_;
  std::vector<ErrorNote> errors_;
  std::map<int, RuntimeNote> runtime_;         // by loader
  std::map<int, RuntimeNote> process_limits_;  // by pid, at most kMaxProcessLimits
  std::vector<CgroupMemoryNote> cgroup_;       // newest kMaxCgroup readings
  std::vector<CudaPeak> cuda_;
  static constexpr size_t kMaxCgroup = 512;          ///< ~2 min at one reading a 0.25 s poll
  std::optional<CgroupMemoryNote> cgroup_tightest_;  ///< whole run
};

}  // namespace dldoctor::analyze
