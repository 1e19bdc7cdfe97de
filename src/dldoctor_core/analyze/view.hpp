// What the rules see: per loader and for the job, every figure already reduced over one
// window (the recent ~10 s or the whole run). Rules are pure functions of a JobView, so
// they can be tested with hand-made views as well as with recorded streams.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/failure_log.hpp"
#include "dldoctor_core/analyze/loader_track.hpp"
#include "dldoctor_core/analyze/process_track.hpp"
#include "dldoctor_core/sample/thread_pools.hpp"
#include "dldoctor_core/system/facts.hpp"

namespace dldoctor::analyze {

/// torch's default prefetch_factor with workers: each worker keeps this many batches in
/// flight unless the loader says otherwise (also what `dldoctor check` assumes).
inline constexpr int kDefaultPrefetchFactor = 2;

/// A hot function from sampled profiles of the fetch (read by the Python side).
struct HotFunction {
  std::string name;               ///< e.g. "resize", "Dataset.__getitem__" (qualified name)
  std::string location;           ///< "file.py:123" ("" unknown, e.g. a builtin)
  double cumulative_ms = 0;       ///< time in it, callees included
  std::optional<double> self_ms;  ///< time in its own code
  int64_t calls = 0;              ///< 0 unknown
};

/// One smaps_rollup read of a worker, with the samples it had fetched by then.
struct MemoryPoint {
  int64_t t_ns = 0;
  int64_t samples = 0;        ///< samples the worker had fetched (all its batches so far)
  int64_t private_dirty = 0;  ///< bytes
  std::optional<int64_t> pss;
  std::optional<int64_t> rss;
};

/// A worker's memory over the window, oldest first.
struct WorkerMemory {
  int pid = 0;
  int worker = -1;
  std::vector<MemoryPoint> points;
  /// The samples read are unknown (an attached job: no hooks), so `samples` is 0 in every
  /// point and the series is read over time.
  bool over_time = false;
};

/// One top-level attribute of a dataset object (from the hooks, in the main process).
struct DatasetAttr {
  std::string name;  ///< e.g. "paths", "dataset.samples" (one level of wrapping)
  std::string type;  ///< "list", "dict", "numpy.ndarray", ...
  std::optional<int64_t> elements;
  std::optional<int64_t> bytes;  ///< estimated, elements included
  std::string element_type;      ///< of a sampled element, "" unknown
  bool python_objects = false;   ///< a Python container of Python objects (list, dict, ...)
};

/// What the main process measured of a loader's dataset when its first iterator was made.
struct DatasetNotes {
  std::string type;
  std::optional<int64_t> length;               ///< samples per epoch, as torch's sampler holds it
  std::vector<DatasetAttr> attrs;              ///< largest first
  std::optional<int64_t> pickled_bytes;        ///< what spawn/forkserver send to each worker
  std::optional<double> pickle_ms;             ///< torch's own pickling of it, per worker
  bool pickle_complete = true;                 ///< false: cut at the time budget (a lower bound)
  std::optional<int64_t> shared_tensor_bytes;  ///< tensors, sent through shared memory
};

/// A slow batch as the worker reported it, with the sample indices it held.
struct SlowBatchNote {
  int pid = 0;
  int worker = -1;
  int index = -1;
  int64_t fetch_ns = 0;
  std::vector<int64_t> samples;  ///< the dataset indices of the batch (first 64)
};

/// One worker's batch times over the window.
struct WorkerFetch {
  int worker = -1;
  int pid = 0;
  int64_t batches = 0;
  std::optional<double> p50_ms, p90_ms, max_ms;
};

/// Thread pools of one worker process.
struct WorkerPools {
  int pid = 0;
  sample::ThreadPools pools;
  std::optional<int> torch_threads;  ///< torch.get_num_threads() seen in the worker
};

/// What sampled Python stacks showed of a loader when the job runs without the hooks
/// (`dldoctor attach`): shares of the samples taken, no per-batch timing. The fetching
/// processes are the workers, or the main process when num_workers=0.
struct StackShares {
  double window_s = 0;        ///< the stretch the samples cover
  int64_t main_samples = 0;   ///< samples of the thread that iterates the loader
  double main_in_loader = 0;  ///< of those, inside the loader's __next__: waiting for a batch
  double main_collective = 0; ///< of those, inside a torch.distributed call (outside the loader)
  int64_t fetch_samples = 0;  ///< samples of the fetching processes, all together
  double getitem = 0;         ///< of fetch_samples: in the dataset under the fetcher
  double collate = 0;         ///< in collate_fn
  double reading = 0;         ///< in the dataset, blocked in a file, socket or pipe read
  double idle = 0;            ///< a worker waiting for its next index (_worker_loop's get)
  double sending = 0;         ///< a worker putting a batch on the result queue
  double other = 0;           ///< anywhere else (startup, worker_init_fn ...)
  int64_t failed_samples = 0; ///< samples that could not be read: counted, never guessed
};

/// The rank of a loader's main process in a multi-rank job (torchrun, Lightning, accelerate,
/// SLURM, MPI), from that process's environment or torch.distributed; empty fields unknown.
struct RankId {
  std::optional<int> rank;        ///< global rank
  std::optional<int> local_rank;  ///< rank on this node
  std::optional<int> world_size;
  std::optional<int> local_world_size;
  std::optional<int> group_rank;  ///< the node's rank (torchrun's GROUP_RANK)
  bool known() const noexcept { return rank.has_value() || local_rank.has_value(); }
  /// The rank a report names: the global one, else the local one.
  int shown() const noexcept { return rank ? *rank : local_rank.value_or(-1); }
};

/// How an IterableDataset's data fell to the workers over a window: the time workers spent
/// with their share run out (kWorkerDrained) while their epoch went on, clipped to the window.
struct WorkerSplit {
  int num_workers = 0;
  double worker_s = 0;  ///< num_workers x the epochs' time in the window, summed
  double idle_s = 0;    ///< of that, workers' time after their share ran out
  /// The epoch in which the workers idled the longest: its time in the window and the
  /// workers that ran out in it, with how long each then idled.
  double epoch_s = 0;
  struct Out {
    DrainedWorker worker;
    double after_s = 0;  ///< from the epoch's start
    double idle_s = 0;   ///< to the epoch's end (or the window's)
  };
  std::vector<Out> ran_out;
  /// Of the loop's blocked time (stepped batches) in the window, the share while a worker of
  /// its epoch had run out (MainSums::short_wait_ns); empty when the loop never waited.
  std::optional<double> short_handed_wait_share;
  double idle_share() const noexcept { return worker_s > 0 ? idle_s / worker_s : 0.0; }
  /// Workers that had data, on average over the window.
  double active_workers() const noexcept { return num_workers * (1.0 - idle_share()); }
};

/// One loader over one window.
struct LoaderView {
  uint16_t loader = 0;
  LoaderConfig config;
  RankId rank;                  ///< of its main process (unknown: a job without ranks)
  int rank_loader = 0;          ///< its number among its rank's loaders, 1 first (0: no rank)
  int64_t batches = 0;          ///< handed to the consumer in the window
  int64_t stepped_batches = 0;  ///< of those, with a measured consumer step
  double loop_s = 0;            ///< wait + step of the stepped batches
  /// wait / (wait + step) over stepped batches: the share of the loop spent waiting.
  std::optional<double> data_stall_fraction;
  std::optional<double> wait_mean_s;  ///< per stepped batch
  /// What handing over a batch costs the consumer even when one is ready: its quickest
  /// waits (kHandoverQuantile of the whole run's), the receive and unpickle a worker's batch
  /// takes. The stall beyond it is time the loop spent waiting for batches not yet made.
  std::optional<double> handover_s;
  /// Stepped batches whose hand-over was measured (a wait of 1 ms or more, the worker's fetch
  /// end known: MainSums::made_known), and the part of their waits after their batch was
  /// made, in all. The others' hand-over is taken as handover_s.
  int64_t handover_measured = 0;
  double handover_measured_s = 0;
  /// The median of the measured hand-overs (whole run: LoaderTrack::handover_sample).
  std::optional<double> handover_measured_p50_s;
  std::optional<double> step_mean_s;  ///< the consumer's own time per batch
  /// The consumer's time per batch over the batches it waited for (kMinSteadyBatches of
  /// them at least), else step_mean_s: its pace while the loader lagged. A run with a fast
  /// phase and a slow one averages to a pace the workers could match, though they could
  /// not in the phase that stalled.
  std::optional<double> demand_step_s;
  std::optional<double> batches_per_s;  ///< what the loop achieved
  int64_t worker_batches = 0;           ///< fetched in the window
  std::optional<double> fetch_mean_s;   ///< per batch, getitem + collate
  std::optional<double> fetch_p50_ms;
  std::optional<double> getitem_p50_ms;   ///< per sample
  std::optional<double> getitem_p99_ms;   ///< per sample
  std::optional<double> collate_p50_ms;   ///< per batch
  std::optional<double> collate_share;    ///< collate time / fetch time
  /// fetching thread's CPU time / fetch time (events); attached: the fetching processes' CPU
  /// time over their time in the fetch (sampler CPU over the stacks' fetch share)
  std::optional<double> on_cpu_fraction;
  std::optional<double> samples_per_batch;
  std::optional<double> batch_bytes_mean;
  /// Batches finished by the workers and not yet taken by the consumer, at its hand-outs
  /// (mean, most at once): with pin_memory, the pinned copies waiting (MainSums::ready_sum).
  std::optional<double> ready_batches_mean;
  std::optional<int64_t> ready_batches_max;
  std::vector<int> worker_pids;  ///< worker processes alive in the window
  /// Sampler figures of the processes that fetch: the workers, or the main process when
  /// num_workers=0.
  ProcAgg fetchers;
  ProcAgg main;  ///< sampler figures of its main process (a rank's main process per rank)
  std::vector<HotFunction> hot_functions;  ///< hottest first

  // Beyond the field guide's causes: memory, startup, stragglers, thread pools.
  std::optional<double> fetch_p99_ms;
  std::optional<double> fetch_max_ms;
  std::optional<double> wait_s;          ///< blocked time of the stepped batches, in all
  std::optional<double> head_of_line_s;  ///< of that, behind a straggler (MainSums::hol_ns)
  int64_t head_of_line_batches = 0;
  std::vector<WorkerFetch> worker_fetch;           ///< per worker id
  std::vector<WorkerBatchRecord> slowest_batches;  ///< slowest first (at most 16)
  std::vector<SlowBatchNote> slow_notes;           ///< sample indices of slow batches
  std::vector<EpochRecord> epochs;                 ///< iterators started in the window
  std::vector<WorkerMemory> worker_memory;         ///< workers alive in the window
  std::optional<DatasetNotes> dataset;
  std::vector<WorkerPools> worker_pools;  ///< workers with more than one thread
  /// Without the hooks (attach): what the stacks showed; per-batch figures are then empty.
  std::optional<StackShares> stacks;
  /// Workers whose share of an IterableDataset ran out before their epoch ended; empty when
  /// none did (a map-style dataset's workers never run out: its sampler ends the epoch).
  std::optional<WorkerSplit> worker_split;

  /// Processes fetching batches in parallel (the main process alone when num_workers=0).
  int fetch_processes() const noexcept { return config.num_workers > 0 ? config.num_workers : 1; }
  /// Of those, the ones with data on average: an IterableDataset's workers whose share ran
  /// out no longer fetch (worker_split).
  double active_fetch_processes() const noexcept {
    if (!worker_split || config.num_workers <= 0) return double(fetch_processes());
    return std::clamp(worker_split->active_workers(), 0.05, double(config.num_workers));
  }
};

/// One GPU over one window, as NVML saw it through the sampler (analyze/gpu_track).
struct GpuDeviceView {
  int index = 0;                           ///< NVML's index (nvidia-smi's)
  int passes = 0;                          ///< passes that read its utilization
  std::optional<double> utilization_pct;   ///< mean % of time a kernel was running on it
  std::optional<int64_t> memory_used_max_bytes;
  std::optional<int64_t> memory_total_bytes;
  std::optional<int64_t> job_memory_max_bytes;  ///< the job's processes' memory on it, most seen
  bool job = false;                        ///< a process of the job had a CUDA context on it
};

/// The GPUs over one window.
struct GpuView {
  bool measured = false;     ///< NVML answered in a pass of the window
  std::string not_measured;  ///< why not, when !measured ("" before any pass)
  std::vector<GpuDeviceView> devices;
};

/// The job over one window.
struct JobView {
  bool whole_run = false;
  int64_t from_ns = 0;  ///< window start (the first event for the whole run)
  int64_t to_ns = 0;
  system::Facts facts;
  std::optional<system::StorageFacts> data_storage;
  std::vector<LoaderView> loaders;
  /// Most worker processes (all loaders, all main processes) alive at once in the window.
  std::optional<int> total_workers;
  ProcAgg all_workers;   ///< sampler figures over every worker process
  ProcAgg main_process;  ///< sampler figures over the main process(es)
  MachineAgg machine;
  /// CPU use over the stretch the capacity model reads (analyze/capacity): the window
  /// itself, or for the whole run the passes kept since the first event (at most the newest
  /// 20 s), so the job's start-up (imports, building the dataset) does not count as what
  /// the main process takes from the workers while the loop runs.
  struct CpuUse {
    ProcAgg main_process, workers;
    MachineAgg machine;
  } cpu_use;
  /// Deaths, error texts and runtime facts of the job (failure rules).
  FailureView failures;
  GpuView gpu;  ///< NVML's view of the GPUs (analyze/gpu_idle says which are the job's)

  /// Ranks seen among the loaders (1 for a job without ranks): the node's main processes
  /// that each feed their own loaders.
  int ranks() const noexcept {
    std::vector<int> seen;
    for (const LoaderView& l : loaders)
      if (l.rank.known() && std::find(seen.begin(), seen.end(), l.rank.shown()) == seen.end())
        seen.push_back(l.rank.shown());
    return seen.empty() ? 1 : int(seen.size());
  }

  /// CPUs the workers may use: facts.cpu.usable, else the affinity count. Never the
  /// machine's CPU count: a cgroup quota or taskset makes that a lie.
  std::optional<double> usable_cpus() const noexcept {
    if (facts.cpu.usable) return *facts.cpu.usable;
    if (facts.cpu.affinity) return double(*facts.cpu.affinity);
    return std::nullopt;
  }
};

}  // namespace dldoctor::analyze
