// `dldoctor tune`: which DataLoader settings to try next, from what the diagnostic run and
// the trials so far measured, and what limits throughput after the best of them (the
// ceiling). The trials themselves are runs of the job (Python, watcher/tune_trials.py); the
// reasoning that picks them is here.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace dldoctor::analyze::tune {

/// A trial's settings, by DataLoader keyword; empty fields are the job's own.
struct Settings {
  std::optional<int> num_workers;
  std::optional<int> prefetch_factor;
  std::optional<bool> persistent_workers;
  std::optional<int> worker_threads;
  bool operator==(const Settings&) const = default;
};

/// What the diagnostic run (the job's own settings under `dldoctor run`) measured of the
/// loader being tuned.
struct Profile {
  int num_workers = 0;  ///< the job's own settings
  int prefetch_factor = 2;
  bool persistent_workers = false;
  std::optional<double> usable_cpus;
  /// Workers the measured CPU allows (analyze::CpuBudget::workers(), a fetch finding's
  /// recommended_num_workers), for a CPU-bound fetch.
  std::optional<int> cpu_workers;
  std::optional<double> cpu_left;        ///< cores left for the workers (capacity model)
  std::optional<double> per_worker_cpu;  ///< share of a core a worker uses while fetching
  std::optional<double> fetch_s;         ///< one batch's fetch in a worker
  std::optional<double> step_s;          ///< the consumer's own time per batch
  std::optional<double> main_cpu_cores;  ///< the main process's CPU while the loop ran
  std::optional<double> batches_per_s;   ///< what the diagnostic run's loop achieved
  bool off_cpu = false;                  ///< io_bound: the workers mostly wait
  bool startup_bound = false;            ///< worker_startup_cost: start-up per epoch
  bool thread_oversubscribed = false;    ///< thread_oversubscription
  bool keeps_up = false;                 ///< healthy or main_process_bound: data is not the limit
};

/// One trial as measured.
struct Trial {
  Settings settings;
  std::optional<double> batches_per_s;  ///< empty when it failed
  double ci = 0;                        ///< half-width of its 95 % interval
  bool ok = true;                       ///< false: failed (crash, shm exhausted, hang)
};

/// num_workers tried when stepping up or down from the best so far (the sweep).
inline constexpr int kWorkerSteps[] = {0, 1, 2, 4, 8, 16, 32};

/// A step to more workers (or prefetch) is followed further only when it gained more than
/// this share over the best before it: smaller gains are within a trial's own ±5 % interval.
inline constexpr double kMinGain = 0.05;

/// Off-CPU waits: workers beyond this many per usable CPU are not tried, the main process's
/// unpickling and IPC, and memory, limit long before.
inline constexpr int kMaxWorkersPerCpu = 16;

/// A fetch shorter than this per batch is tried in the main process too (num_workers=0):
/// handing a batch from a worker costs a pickle, a queue and an unpickle, ~0.1-1 ms, so a
/// cheaper fetch is faster without workers, and no worker start-up is paid per epoch.
inline constexpr double kInProcessFetchS = 0.002;

/// The settings the model picks first: the worker count the measured CPU allows for a
/// CPU-bound fetch; enough workers for the loop's demand when they wait off-CPU; persistent
/// workers when start-up is the cost; one thread per worker when their pools oversubscribe.
Settings first_guess(const Profile& p);

/// The next trial, from the profile and the trials so far (the job's own settings first
/// among them); empty when nothing untried is worth it.
std::optional<Settings> next_trial(const Profile& p, const std::vector<Trial>& done);

/// The best trial's index: the first that measured, replaced only by one faster by more
/// than kMinGain (a difference within a trial's own interval is not a gain); empty when
/// none measured.
std::optional<size_t> best_index(const std::vector<Trial>& done);

/// What limits throughput next, with the rate it allows.
struct Ceiling {
  std::string limit;  ///< "usable cores x CPU per batch", "the consumer's own step", ...
  double batches_per_s = 0;
};
/// The lowest of the limits the profile can put a number on, at the rate it measured
/// (`batches_per_s`: the best trial's); a limit below that rate is left out; empty when none.
std::optional<Ceiling> ceiling(const Profile& p);

/// `s` with the job's own settings filled in (what the loader really ran with).
Settings effective(const Profile& p, const Settings& s);

}  // namespace dldoctor::analyze::tune
