// A job seen from outside (`dldoctor attach`): no hooks, so no events. What is known comes
// from the /proc sampler and from sampled Python stacks (py-spy), and this turns both into
// what the rules read: a JobView whose per-batch figures stay unknown and whose stall and
// capacity come from the shares of the stack samples, and, when the tree looks stuck, the
// HangSnapshot and HangContext the hang rules read.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dldoctor_core/analyze/process_reading.hpp"
#include "dldoctor_core/analyze/process_track.hpp"
#include "dldoctor_core/analyze/verdict.hpp"
#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/sample/snapshot.hpp"
#include "dldoctor_core/system/facts.hpp"
#include "dldoctor_core/watchdog/hang.hpp"
#include "dldoctor_core/watchdog/watchdog.hpp"

namespace dldoctor::analyze {

/// A loader counts as stuck when its main process spends at least this share of the
/// window's samples inside it (waiting, or fetching itself with num_workers=0): a loop that
/// steps between batches leaves the loader every step, and a tenth leaves room for the
/// status checks torch makes while it waits.
inline constexpr double kStuckInLoaderShare = 0.9;
/// A process of the loader that read at least this many bytes a second over the second half
/// of the window makes progress, whatever its CPU (a worker on a slow socket: io_bound). A
/// stuck tree reads nothing: a worker blocked on a pipe or a lock, a main process that polls
/// its queue in vain.
inline constexpr double kProgressReadBytesPerS = 1024;
/// Workers whose memory (smaps_rollup) an attach reads, over the whole job: a read of a
/// forked torch worker costs 5-25 ms, and cow_memory_growth needs three of a worker within
/// the window (a default 10 s). Spread over every worker of a 2-worker loader, half a
/// percent of one core gave each 2-3 reads, so the rule missed a plain growth about one
/// attach in five; the reads of two workers are enough (the rule counts the workers not read
/// as growing alike), and the next reads of more would only come later.
inline constexpr size_t kAttachMemoryWorkers = 2;

/// A loader of the attached job, as the process tree and the stacks showed it.
struct AttachedLoader {
  int loader = 0;
  int main_pid = 0;
  int num_workers = 0;           ///< 0: the main process fetches (no worker processes)
  std::vector<int> worker_pids;  ///< worker id i at index i (-1 or 0: not running)
  trace::StartMethod start_method = trace::StartMethod::kUnknown;
  bool pin_memory = false;  ///< a pin-memory thread runs in the main process
  bool persistent_workers = false;
  std::string collate_fn;      ///< qualname when seen ("" unknown or torch's default)
  std::string worker_init_fn;  ///< qualname when known
};

/// One distinct stack of a thread and how many samples showed it.
struct SampledStack {
  std::vector<watchdog::PyFrame> frames;  ///< most recent call first (frame_from_pyspy)
  std::vector<std::string> names;         ///< py-spy's qualified name of each frame
  int64_t count = 0;
};

/// The samples of one thread over the window.
struct ThreadSamples {
  std::string name;  ///< the Python thread name ("MainThread")
  int64_t tid = 0;   ///< the OS thread id, 0 unknown
  std::vector<SampledStack> stacks;
};

/// Where one sample put a process.
enum class SampledPlace {
  kGetitem,     ///< a fetcher in the dataset, computing
  kCollate,     ///< a fetcher in collate_fn
  kReading,     ///< a fetcher in the dataset, blocked in a read (file, socket, pipe)
  kIdle,        ///< a worker waiting for its next index
  kSending,     ///< a worker putting a batch on the result queue
  kOther,       ///< a worker anywhere else (startup, worker_init_fn)
  kInLoader,    ///< the main process inside the loader's __next__ (waiting for a batch)
  kCollective,  ///< the main process in a torch.distributed call, outside the loader
  kStep,        ///< the main process anywhere else: the training step
};

/// "getitem", "collate", "reading", "idle", "sending", "other", "in_loader", "collective",
/// "step".
const char* sampled_place_name(SampledPlace p) noexcept;

/// A py-spy frame as faulthandler would print it: its function is the last part of py-spy's
/// qualified name ("_MapDatasetFetcher.fetch" -> "fetch", "fetch.<locals>.<listcomp>" ->
/// "<listcomp>"), so the readings that read faulthandler's stacks read it the same way.
watchdog::PyFrame frame_from_pyspy(const std::string& qualified_name, const std::string& file,
                                   std::optional<int> line);

/// Whether a frame at the top of a dataset's stack is blocked reading (socket, ssl, http,
/// a pipe; or a C-level read named on the caller's line: `.recv(`, `.read(` ...).
bool reading_frame(const watchdog::PyFrame& top);

/// Where one stack (most recent call first) puts a process: a worker of `loader` when
/// worker >= 0, else a main process (that fetches itself when its loader has no workers).
SampledPlace place_of_sample(const std::vector<watchdog::PyFrame>& frames, int worker,
                             const watchdog::LoaderContext* loader);

/// The tally of one process's samples.
struct ProcessTally {
  int pid = 0;
  int64_t samples = 0;  ///< of the thread that matters (the loop's, or the worker loop's)
  int64_t failed = 0;   ///< samples that could not be read
  std::map<SampledPlace, int64_t> places;
  std::string thread;       ///< the thread read
  size_t distinct = 0;      ///< distinct stacks of that thread
  bool pin_thread = false;  ///< a thread runs torch's pin-memory loop
  int64_t share_of(SampledPlace p) const {
    auto it = places.find(p);
    return it == places.end() ? 0 : it->second;
  }
};

/// The analysis of one attached job. Thread-safe: the sampler's thread ingests passes while
/// the caller adds stack samples.
class AttachSession {
 public:
  /// `facts` are the watcher's machine facts; the CPUs and descriptor limits are narrowed to
  /// the job's main processes' own (affinity, RLIMIT_NOFILE), read here.
  AttachSession(std::vector<AttachedLoader> loaders, system::Facts facts);

  /// One sampler pass over the job's tree.
  void ingest(const sample::Snapshot& s);
  /// The stack samples of one process over the window; `failed`: samples that could not be
  /// read; `period_ms`: the time one sample stands for (the hot functions' ms).
  void add_samples(int pid, std::vector<ThreadSamples> threads, int64_t failed, double period_ms);
  /// Forgets the loaders not in `ids`: a main process without workers is a loader only if
  /// its samples entered a DataLoader (num_workers=0), which the samples decide.
  void keep_loaders(const std::set<int>& ids);
  /// The window the samples and passes cover (CLOCK_MONOTONIC).
  void set_window(int64_t from_ns, int64_t to_ns);

  /// What the rules read; per-batch figures unknown.
  JobView view() const;
  /// The tally of each process that gave samples, by pid.
  std::vector<ProcessTally> tallies() const;
  /// Loaders whose main process sat in the loader (kStuckInLoaderShare) while none of its
  /// fetching processes used kBusyCpuShare of a core: the tree makes no progress.
  std::vector<int> stuck_loaders() const;
  /// The custom collate_fn a loader's stacks showed, else its configured one ("" default).
  std::string collate_fn(const AttachedLoader& a) const;
  /// The processes of the job and their roles, for a hang capture.
  std::vector<watchdog::WatchedProcess> processes() const;
  /// What the hang rules need to know of the loaders (what attaching can know of it).
  watchdog::HangContext hang_context() const;
  /// A capture of the stuck tree: the kernel view of each process now, its CPU since the
  /// window began, and `stacks` (pid -> every thread's stack, from a full dump), source lines
  /// annotated. stalled_s is the window: the tree was stuck at least that long.
  /// From then on the stuck loaders have no stall figures: a loader that hands out nothing
  /// is not slow, and the hang rules speak of it instead of the throughput rules.
  watchdog::HangSnapshot capture_hang(std::map<int, std::vector<watchdog::PyThreadStack>> stacks,
                                      const std::map<int, std::string>& notes);
  /// The main process's Python threads (other than its main thread) that were alive when its
  /// workers were forked, as the caller read them (threads alive now that started before
  /// the first worker: a lower bound). For the hang rules' fork explanation.
  void note_threads_at_fork(int main_pid, std::vector<std::string> names);

  /// The report decided: the rules over the view, merged with `hang` findings when given.
  Decision decide(const std::vector<report::Finding>& hang, bool hung) const;
  /// The facts as narrowed to the job.
  system::Facts facts() const;
  std::vector<AttachedLoader> loaders() const;
  /// The workers whose memory is read, at most `max`: worker i of each loader in turn,
  /// i = 0, 1, ... (ranks' loaders look alike; of a training and a validation loader, one
  /// may sit idle).
  std::vector<int> memory_workers(size_t max = kAttachMemoryWorkers) const;

 private:
  /// Per function of the fetch: samples in it (callees included), at its top, and per line.
  struct HotCount {
    std::string name, file;
    int64_t cumulative = 0, self = 0;
    std::map<int, int64_t> lines;
  };
  const AttachedLoader* loader_of(int pid, int* worker) const;
  LoaderView loader_view_locked(const AttachedLoader& a) const;
  std::string collate_fn_locked(const AttachedLoader& a) const;
  void count_hot_locked(int loader, const std::vector<watchdog::PyFrame>& frames,
                        const std::vector<std::string>& names, int64_t n);

  mutable std::mutex mu_;
  std::vector<AttachedLoader> loaders_;
  system::Facts facts_;
  ProcessTrack procs_;
  std::map<int, ProcessTally> tallies_;
  std::map<int, std::map<std::pair<std::string, std::string>, HotCount>> hot_;  ///< per loader
  double period_ms_ = 0;  ///< what one sample stands for
  std::unordered_map<int, WorkerPools> pools_;
  std::set<int> probed_;
  std::map<int, watchdog::CpuMark> cpu_at_start_;  ///< each process at its first pass
  std::map<int, std::string> collate_seen_;  ///< per loader: a custom collate_fn in the stacks
  std::map<int, std::vector<std::string>> threads_at_fork_;  ///< per main pid
  static constexpr size_t kMaxMemoryPoints = 32;  ///< smaps reads per worker; thinned when full
  std::map<int, std::vector<MemoryPoint>> memory_;  ///< worker pid -> its smaps reads
  std::set<int> stuck_;                                      ///< loaders captured as stuck
  int64_t from_ns_ = 0, to_ns_ = 0;
};

}  // namespace dldoctor::analyze
