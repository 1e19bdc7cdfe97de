// The rules: one function per finding id, each in its own file, each a pure function of a
// JobView that appends zero or more findings. Shared here: the first question of every
// analysis, "is this loader data-bound at all?".
#pragma once

#include <optional>
#include <vector>

#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze {

/// Share of the loop the main process may spend waiting for batches before the loader
/// counts as a bottleneck. Below it the loader keeps up: timer noise and the occasional
/// slow batch already cost a few percent, and no change to the loader could buy back more
/// than that (DESIGN.md section 4).
inline constexpr double kDataStallFraction = 0.05;

/// Consumer steps a window needs before it is judged: fewer give no stable mean, and the
/// first batches of an epoch are still warming up (page cache, allocator, JIT).
inline constexpr int64_t kMinSteadyBatches = 5;

/// Loop time (wait + step) a window needs before it is judged: a shorter one is a start-up
/// transient (workers still filling their prefetch queues, a cold page cache), and a
/// streaming verdict named from it would cry wolf.
inline constexpr double kMinJudgedLoopS = 2.0;

/// Enough batches to judge, and the loop waits on the loader at least kDataStallFraction.
bool stalled(const LoaderView& l) noexcept;
/// Enough batches to judge, and the loop waits on the loader less than kDataStallFraction.
bool keeps_up(const LoaderView& l) noexcept;

/// The loader keeps up and the main process is busy on CPU: the consumer is the limit.
void rule_main_process_bound(const JobView& job, std::vector<report::Finding>& out);
/// More worker processes than usable CPUs, proven by run-queue delay / preemption.
void rule_too_many_workers(const JobView& job, std::vector<report::Finding>& out);
/// Workers compute most of the fetch and cannot keep up; the time is in __getitem__.
void rule_slow_getitem(const JobView& job, std::vector<report::Finding>& out);
/// As slow_getitem, but the time is in collate_fn.
void rule_slow_collate(const JobView& job, std::vector<report::Finding>& out);
/// Workers wait (off-CPU) most of the fetch and cannot keep up.
void rule_io_bound(const JobView& job, std::vector<report::Finding>& out);

// Failures and the risks that precede them (issue 4): one file each.
/// /dev/shm too small for the batches in flight: predicted, or a worker failed on it.
void rule_shm_exhausted(const JobView& job, std::vector<report::Finding>& out);
/// pinned_memory_pressure / ram_pressure: memory short, swapping or stalled on it; and
/// pin_memory=True without an accelerator (info).
void rule_memory_pressure(const JobView& job, std::vector<report::Finding>& out);
/// Descriptors near RLIMIT_NOFILE, or "Too many open files" passing batches.
void rule_fd_limit(const JobView& job, std::vector<report::Finding>& out);
/// A worker killed by a signal or exiting non-zero, with the reason.
void rule_worker_died(const JobView& job, std::vector<report::Finding>& out);
/// cuda_oom (out of memory raised) / cuda_oom_risk (peaks near the device's memory).
void rule_cuda_oom(const JobView& job, std::vector<report::Finding>& out);

// Beyond the field guide (issue 6): one file each.
/// The workers' own thread pools oversubscribe the CPUs, proven by their threads' queueing.
void rule_thread_oversubscription(const JobView& job, std::vector<report::Finding>& out);
/// Forked workers' private memory grows with the samples they read (copy-on-write).
void rule_cow_memory_growth(const JobView& job, std::vector<report::Finding>& out);
/// Worker start-up (respawned every epoch, heavy pickling) is a large share of the epochs.
void rule_worker_startup_cost(const JobView& job, std::vector<report::Finding>& out);
/// A slow worker or a few slow batches hold the in-order loop up (head-of-line blocking).
void rule_straggler_worker(const JobView& job, std::vector<report::Finding>& out);

/// Worker oversubscription as too_many_workers sees it.
struct Oversubscription {
  int total_workers = 0;
  double usable_cpus = 0;
  std::optional<double> runq_delay_pct;        ///< mean over the workers
  std::optional<double> involuntary_cs_per_s;  ///< mean per worker
  bool proven = false;  ///< run-queue delay (or, unknown, preemption rate) shows contention
};
/// More workers than usable CPUs in the window (empty when not, or when unknowable).
std::optional<Oversubscription> oversubscription(const JobView& job) noexcept;

/// Every rule, most fundamental first.
std::vector<report::Finding> run_rules(const JobView& job);

}  // namespace dldoctor::analyze
