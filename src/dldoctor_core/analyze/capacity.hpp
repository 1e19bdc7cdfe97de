// Can a loader's workers keep up with its consumer, and do they compute or wait while
// they fetch? Shared by slow_getitem, slow_collate and io_bound, which split the stalled
// loaders between them on the same figures.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/data_bound.hpp"
#include "dldoctor_core/analyze/gpu_idle.hpp"
#include "dldoctor_core/analyze/text.hpp"
#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze {

/// A fetch is CPU-bound when the worker is on a CPU, or runnable and queued for one, for
/// at least this share of it; below it the worker mostly sleeps (reads, sockets, locks).
/// One cut at one half gives every stalled loader exactly one of slow_* or io_bound.
inline constexpr double kCpuBoundFraction = 0.5;

/// Workers count as unable to keep up when capacity < demand × this. Capacity and demand
/// come from different clocks (the workers' fetch vs the consumer's step), and unpickling
/// in the main process adds to each batch without showing in the fetch; a 10 % allowance
/// keeps a real shortfall from being missed. Above it the workers could keep up and the
/// stall has another cause, which these rules do not claim.
inline constexpr double kCapacityMargin = 1.1;

/// Headroom when sizing num_workers: fetch times vary, and a count sized for the mean
/// demand alone lets the queue drain on every slow batch.
inline constexpr double kWorkerHeadroom = 1.1;

/// Which part of the fetch a CPU-bound loader should speed up: collate_fn when it holds
/// at least this share of the fetch time, else __getitem__. The larger part is the one
/// whose speed-up moves the total.
inline constexpr double kCollateShare = 0.5;

/// Run-queue delay (% of wall) of the workers below which the CPUs count as free: an
/// uncontended machine stays in the low single digits.
inline constexpr double kFreeCpuRunQueuePct = 10.0;

/// Cores each main process is assumed to keep for itself when its CPU use was not measured
/// (and what `dldoctor check`, which has no job to measure, assumes): it unpickles every
/// batch from the workers' queue, runs the pin-memory thread and drives the model. A
/// measured main process counts for what it uses: one that mostly waits on a GPU (or on
/// its loader) leaves most of its core to the workers.
inline constexpr int kMainProcessCores = 1;

/// One more worker is worth adding when the CPU left would give it at least this share of
/// what one worker uses while fetching. Measured on the demo (1 worker decoding JPEGs, 2
/// CPUs, the main process at 0.55 of a core, 1.4 CPUs left): the second worker, with 0.4
/// of a core to it, made the loop 1.6-2.0x faster (bench/demo_prescription.py); below a
/// quarter it mostly takes turns with the others and the main process.
inline constexpr double kMinWorkerShare = 0.25;

/// Batches a second one main process can take from worker processes at best: each batch
/// crosses from a worker through a queue (pickled, its tensors passed as shared-memory
/// handles), tens to hundreds of microseconds of the main process's time. Measured here
/// (bench/overhead.py tiny-2: batches of 8 ints, 2 fork workers, 2 CPUs): 1,200-1,400
/// batches/s. A loop without workers that wants more than this is not helped by them,
/// whatever CPU is free: its batches must carry more samples instead.
inline constexpr double kMaxWorkerHandoutsPerS = 10'000;

/// The CPU left for workers, from measurement: the usable CPUs less what the main processes
/// use, less what other processes on those CPUs use (when the sampler can tell), less the
/// job's other loaders' workers, against what one worker uses while it fetches.
struct CpuBudget {
  double usable = 0;           ///< usable CPUs (affinity and quota)
  double main_cores = 0;       ///< the main processes' CPU, in cores
  bool main_measured = false;  ///< false: kMainProcessCores per main process assumed
  int main_processes = 1;
  std::optional<double> other_cores;  ///< other processes' CPU on these CPUs: machine busy
                                      ///< less the job's; empty when the sampler cannot tell
                                      ///< (affinity or quota narrower than the machine)
  double other_loaders_cores = 0;     ///< the job's other loaders' workers
  double per_worker = 1;              ///< CPU one worker wants while it fetches (cores)
  /// Cores left for this loader's workers.
  double left() const noexcept {
    return std::max(0.0, usable - main_cores - other_cores.value_or(0) - other_loaders_cores);
  }
  /// Workers whose CPU fits in left(): each whole worker, plus one more when the remainder
  /// gives it at least kMinWorkerShare of what it wants; at least 1.
  int workers() const noexcept;
};
/// The budget of loader `l` (null: of every worker of the job, each wanting a whole core);
/// empty when the usable CPUs are unknown.
std::optional<CpuBudget> cpu_budget(const JobView& job, const LoaderView* l) noexcept;

/// The sentence that says where the CPU goes, in the job's numbers: "the main process uses
/// 0.3 of the 2 usable CPUs and other processes 0.1, which leaves 1.6 for workers, each
/// using 0.97 while it fetches".
std::string cpu_budget_text(const CpuBudget& b);

/// The workers' throughput against what the consumer asks for.
struct FetchCapacity {
  double fetch_s = 0;       ///< mean fetch time of one batch (getitem + collate)
  int fetch_processes = 1;  ///< workers (1: the main process, num_workers=0)
  /// Of those, the ones with data on average (LoaderView::active_fetch_processes).
  double active_processes = 1;
  double capacity_bps = 0;  ///< batches/s the workers can supply
  double demand_bps = 0;    ///< batches/s the consumer would take if never blocked (its
                            ///< pace over the batches it waited for)
  bool serial = false;      ///< num_workers=0: fetch and step never overlap
  /// The workers cannot keep up (serial loading never overlaps, so it always counts).
  bool short_of_demand() const noexcept {
    return serial || capacity_bps < demand_bps * kCapacityMargin;
  }
};
std::optional<FetchCapacity> fetch_capacity(const LoaderView& l) noexcept;

/// Without per-batch timing (attach), the fetching processes count as short of demand when
/// they are idle, waiting for an index, in less than this share of their samples while the
/// loop stalls: with the main process waiting, a worker that kept up would have finished its
/// prefetched batches and wait for the next index. A fifth leaves room for the waits between
/// epochs and for a share read off a few hundred samples; above it the workers had time to
/// spare and the stall has another cause, which these rules do not claim.
inline constexpr double kStackIdleShare = 0.2;

/// A stalled loader whose workers cannot keep up, and how busy they are while fetching.
struct Shortfall {
  /// Capacity against demand from the per-batch timing; empty without it (attach), where
  /// `stacks` proves the shortfall instead.
  std::optional<FetchCapacity> capacity;
  std::optional<double> busy;         ///< busy_fraction(); empty when CPU time was not measured
  std::optional<StackShares> stacks;  ///< the stack samples' proof (attach)
  /// num_workers=0: fetch and step never overlap.
  bool serial = false;
};
/// Empty unless the loader stalls and its workers are short of the consumer's demand: by
/// capacity against demand when batches were timed, else (attach) by the stacks: the
/// fetching processes are almost never idle (kStackIdleShare) while the loop waits.
std::optional<Shortfall> shortfall(const LoaderView& l) noexcept;

/// The stacks show fetching processes that never wait for work: idle in less than
/// kStackIdleShare of enough samples (kMinStackSamples).
bool never_idle(const StackShares& s) noexcept;

/// The figures every fetch finding shows (stall, per-sample and per-batch times, capacity
/// against demand, on-CPU share, CPUs and workers), read from the view at detection.
struct FetchFigures {
  int loader = 0;
  double data_stall_fraction = 0;
  int num_workers = 0;
  /// Its IterableDataset leaves workers without data (uneven_worker_split::uneven): more
  /// workers would idle too, until the split changes.
  bool uneven_split = false;
  Shortfall shortfall;
  std::optional<double> getitem_p50_ms, getitem_p99_ms, collate_p50_ms, fetch_p50_ms;
  std::optional<double> samples_per_batch;
  std::optional<double> consumer_batches_per_s;
  std::optional<double> on_cpu_fraction;      ///< from the events
  std::optional<double> worker_cpu_pct;       ///< sampler, the fetching processes
  std::optional<double> run_queue_delay_pct;  ///< sampler, the fetching processes
  std::optional<double> usable_cpus;
  std::optional<int> total_workers;
  int configured_workers = 0;       ///< num_workers of every loader of the job, summed
  std::optional<CpuBudget> budget;  ///< cpu_budget() of this loader
  GpuIdle gpu;                      ///< the job's GPUs over the same window as the stall
};
FetchFigures fetch_figures(const JobView& job, const LoaderView& l, const Shortfall& s);

/// A stalled loader whose workers compute most of each fetch (or whose CPU time was not
/// measured) and cannot keep up: slow_getitem's or slow_collate's, split by the collate share.
struct CpuBoundFetch {
  FetchFigures figures;
  std::optional<double> collate_share;     ///< collate time / fetch time
  bool custom_collate = false;             ///< the loader's own collate_fn
  std::vector<HotFunction> hot_functions;  ///< from sampled profiles, hottest first
  bool oversubscribed = false;             ///< too_many_workers is proven: cut the work per sample
  int needed_workers = 1;                  ///< workers_for[_stall]() the loop's demand
  std::optional<int> ceiling;              ///< cpu_worker_ceiling()
  /// Proven oversubscription is the first thing to fix (too_many_workers), so the slow fetch
  /// is then a partial cause; unmeasured CPU time lowers confidence the same way.
  report::Severity severity() const noexcept {
    return oversubscribed || !figures.shortfall.busy ? report::Severity::kWarning
                                                     : report::Severity::kCritical;
  }
  /// num_workers=0 and a loop that wants more batches a second than workers could hand
  /// over (kMaxWorkerHandoutsPerS): workers would slow it down.
  bool beyond_worker_handouts() const noexcept {
    const std::optional<FetchCapacity>& c = figures.shortfall.capacity;
    return figures.num_workers == 0 && c && c->demand_bps > kMaxWorkerHandoutsPerS;
  }
  /// The num_workers to prescribe: what the loop needs, capped at what the idle CPUs allow;
  /// empty when no CPU is idle for another worker or the workers already oversubscribe.
  std::optional<int> recommended_workers() const noexcept {
    if (beyond_worker_handouts() || figures.uneven_split) return std::nullopt;
    if (!ceiling || *ceiling <= figures.num_workers || oversubscribed) return std::nullopt;
    return std::min(needed_workers, *ceiling);
  }
};
/// The loaders that stall with workers short of demand and not mostly waiting (that is
/// io_bound's); `oversubscribed`: too_many_workers is proven.
std::vector<CpuBoundFetch> cpu_bound_fetches(const JobView& job, bool oversubscribed);

/// The num_workers the measured CPU allows this loader (cpu_budget().workers()); empty when
/// that is no more than it has, when the usable count is unknown, or when other processes'
/// use could not be measured and the workers queue for a CPU (contended).
std::optional<int> cpu_worker_ceiling(const JobView& job, const LoaderView& l) noexcept;

/// The start of a fix when no CPU is left for another worker: why more workers would not
/// help, in the job's own measured numbers ("Of the 2 usable CPUs the main process uses
/// 0.9 and other processes 0.2, which leaves 0.9 for workers, each using 1 while it fetches:
/// 1 worker already uses it, so more workers would not help: ").
std::string no_cpu_for_more_workers(const FetchFigures& f);

/// The start of a fix when no worker count is prescribed: workers could not hand over the
/// batches the loop wants (beyond_worker_handouts), or no CPU is left for another one
/// (no_cpu_for_more_workers).
std::string no_more_workers(const CpuBoundFetch& c);

/// Adds the figures every fetch finding shows, in their order (the GPU's idle share last).
void add_fetch_evidence(report::Finding& f, const FetchFigures& x);

/// Share of the fetch the fetching process wants a CPU: on-CPU (thread CPU time / fetch
/// time, from the events; else the sampler's CPU %) plus the run-queue delay when known.
std::optional<double> busy_fraction(const LoaderView& l) noexcept;

/// Whether the workers' CPUs are contended (run-queue delay ≥ kFreeCpuRunQueuePct);
/// empty when the sampler could not tell.
std::optional<bool> cpu_contended(const JobView& job, const LoaderView& l) noexcept;

/// Workers needed to supply `demand_bps` at `fetch_s` per batch, with headroom.
int workers_for(double demand_bps, double fetch_s) noexcept;

/// Workers needed when only the stall is known (attach): processes that never idle supply
/// the loop's pace, and the consumer's own share of the loop is 1 - stall, so it asks for
/// 1 / (1 - stall) times what `processes` supply; with headroom.
int workers_for_stall(int processes, double stall) noexcept;

/// The workers' supply against the loop's demand in words: "1 worker supplies 3.1 batches/s,
/// the loop wants 9.9", or, with the stacks only, "1 worker is busy in 98% of its samples
/// while the loop waits 69% of the time".
std::string supply_text(const FetchFigures& f);

/// Why `n` workers would be enough, in the loader's own numbers: "3 workers at 120 ms per
/// batch supply 25 batches/s, above the loop's 20", or, with the stacks only, "the loop
/// waits 69% of the time, so it asks for 3.2x what 1 worker supplies now".
std::string supply_of(int n, const FetchFigures& f);

/// "name (file:line) 3.1 ms/call, 1240 ms in 400 calls; ..." for the hottest `n`.
std::string hot_functions_text(const std::vector<HotFunction>& hot, size_t n = 3);

/// A step of the fetch is named only when it takes at least this share of the profiled
/// time (the largest cumulative figure, the fetch itself); a smaller one would not move the
/// total when made cheaper.
inline constexpr double kHotStepShare = 0.2;

/// The hottest function that is a real step, not a wrapper whose cumulative time is all of
/// the fetch (__getitem__, Compose.__call__, forward ...): the first by cumulative time
/// with kHotStepShare of the total, of the job's own code where one is (owner_of: not an
/// installed package, the standard library or torch), else of any; else the one with the
/// most self time (the work is in __getitem__'s own code); null when nothing is known.
const HotFunction* hottest_step(const std::vector<HotFunction>& hot) noexcept;

/// How to make one hot step of __getitem__ cheaper, by what its name says it does.
std::string hot_step_advice(const std::string& name);

}  // namespace dldoctor::analyze
