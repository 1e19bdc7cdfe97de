// thread_oversubscription: the workers' own thread pools (OpenMP, BLAS, OpenCV) put more
// threads that want a CPU on the usable CPUs than there are CPUs, and the scheduler shows
// them queueing. Never raised on thread counts alone: a pool that sleeps, or caps itself at
// the core count and fits, costs nothing; the proof is the workers' run-queue delay summed
// over their threads (or, unknown, their preemption rate). Fix: cap the pools, with the
// number and the call or variable for each pool found in the workers.
#pragma once

#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze::thread_oversubscription {

/// Mean threads per worker that want a CPU (running or queued at least
/// sample::kActiveThreadShare of the time) above which the workers run pools. A plain
/// worker shows one; its queue feeder thread wakes only to hand a batch over.
inline constexpr double kActiveThreadsPerWorker = 1.5;

/// Threads that want a CPU, all workers together, per usable CPU above which the pools
/// oversubscribe. One pool per worker that caps itself at the core count fits (1.0); the
/// margin keeps a pool of exactly the core count, plus a worker thread waking to hand a
/// batch over, from counting.
inline constexpr double kActiveThreadsPerCpu = 1.5;

/// Run-queue delay of one worker, summed over its threads (% of wall), that proves the
/// pools contend: together its threads wait for a CPU as long as one CPU's whole time.
/// A single-threaded worker can never reach it, however crowded the machine, so the
/// cause is the worker's own threads.
inline constexpr double kThreadRunQueuePct = 100.0;

/// Involuntary context switches per second per worker that prove it when run-queue delay
/// is unknown: a pool of threads over a few CPUs is preempted thousands of times a second,
/// a single busy thread a few hundred at most on a shared CPU.
inline constexpr double kThreadInvoluntaryCsPerS = 1000.0;

/// Run-queue delay of the main process (%) above which oversubscribed worker pools count
/// even while the loader keeps up: they slow the training step instead.
inline constexpr double kMainRunQueuePct = 20.0;

/// Ranked above slow_getitem, which sees the slow fetch the pools cause: the score is the
/// stall times one plus a quarter of the run-queue share (at most 1), and this much more
/// when the loader keeps up and only the main process queues.
inline constexpr double kMainQueuedScore = 0.01;

struct Evidence {
  report::Rank rank;
  int loader = 0;
  int workers = 0;      ///< this loader's
  int job_workers = 0;  ///< every loader's, for the CPUs to share
  double usable_cpus = 0;
  std::optional<double> data_stall_fraction;
  bool loader_stalls = false;  ///< else the main process queues for a CPU
  ProcAgg pools;               ///< the workers' sampler figures (threads, run queue, CPU)
  double active_total = 0;     ///< threads that want a CPU, all workers
  std::optional<double> main_run_queue_delay_pct;
  std::set<std::string> libraries;                       ///< pool libraries mapped into the workers
  std::vector<std::pair<std::string, std::string>> env;  ///< the variables that size them
  std::optional<int> torch_threads;
  int per_worker = 1;  ///< threads each worker's pools should be capped at
};
std::vector<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::thread_oversubscription
