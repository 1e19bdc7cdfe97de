// What the rules see: per loader and for the job, every figure already reduced over one
// window (the recent ~10 s or the whole run). Rules are pure functions of a JobView, so
// they can be tested with hand-made views as well as with recorded streams.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/failure_log.hpp"
#include "dldoctor_core/analyze/loader_track.hpp"
#include "dldoctor_core/analyze/process_track.hpp"
#include "dldoctor_core/system/facts.hpp"

namespace dldoctor::analyze {

/// A hot function from sampled profiles of the fetch (read by the Python side).
struct HotFunction {
  std::string name;              ///< e.g. "resize", "Dataset.__getitem__" (qualified name)
  std::string location;          ///< "file.py:123" ("" unknown, e.g. a builtin)
  double cumulative_ms = 0;      ///< time in it, callees included
  std::optional<double> self_ms; ///< time in its own code
  int64_t calls = 0;             ///< 0 unknown
};

/// One loader over one window.
struct LoaderView {
  uint16_t loader = 0;
  LoaderConfig config;
  int64_t batches = 0;            ///< handed to the consumer in the window
  int64_t stepped_batches = 0;    ///< of those, with a measured consumer step
  double loop_s = 0;              ///< wait + step of the stepped batches
  /// wait / (wait + step) over stepped batches: the share of the loop spent waiting.
  std::optional<double> data_stall_fraction;
  std::optional<double> wait_mean_s;     ///< per stepped batch
  std::optional<double> step_mean_s;     ///< the consumer's own time per batch
  /// The consumer's time per batch over the batches it waited for (kMinSteadyBatches of
  /// them at least), else step_mean_s: its pace while the loader lagged. A run with a fast
  /// phase and a slow one averages to a pace the workers could match, though they could
  /// not in the phase that stalled.
  std::optional<double> demand_step_s;
  std::optional<double> batches_per_s;   ///< what the loop achieved
  int64_t worker_batches = 0;            ///< fetched in the window
  std::optional<double> fetch_mean_s;    ///< per batch, getitem + collate
  std::optional<double> fetch_p50_ms;
  std::optional<double> getitem_p50_ms;  ///< per sample
  std::optional<double> getitem_p99_ms;  ///< per sample
  std::optional<double> collate_p50_ms;  ///< per batch
  std::optional<double> collate_share;   ///< collate time / fetch time
  std::optional<double> on_cpu_fraction; ///< fetching thread's CPU time / fetch time (events)
  std::optional<double> samples_per_batch;
  std::optional<double> batch_bytes_mean;
  std::vector<int> worker_pids;          ///< worker processes alive in the window
  /// Sampler figures of the processes that fetch: the workers, or the main process when
  /// num_workers=0.
  ProcAgg fetchers;
  std::vector<HotFunction> hot_functions;  ///< hottest first

  /// Processes fetching batches in parallel (the main process alone when num_workers=0).
  int fetch_processes() const noexcept { return config.num_workers > 0 ? config.num_workers : 1; }
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
  /// Deaths, error texts and runtime facts of the job (failure rules).
  FailureView failures;

  /// CPUs the workers may use: facts.cpu.usable, else the affinity count. Never the
  /// machine's CPU count: a cgroup quota or taskset makes that a lie.
  std::optional<double> usable_cpus() const noexcept {
    if (facts.cpu.usable) return *facts.cpu.usable;
    if (facts.cpu.affinity) return double(*facts.cpu.affinity);
    return std::nullopt;
  }
};

}  // namespace dldoctor::analyze
