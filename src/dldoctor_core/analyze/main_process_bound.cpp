// main_process_bound: every loader keeps up, and the main process is busy computing. The
// honest answer is "not the loader": prescribing loader changes here would cry wolf.
#include <algorithm>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {

/// Share of wall time (% of one core) the main process wants a CPU — running, or runnable and
/// queued for one — at which the consumer counts as busy computing. Below it the consumer
/// mostly sleeps or waits on a GPU or the network: the job is not data-bound and not
/// CPU-bound in Python either, so there is nothing to report at all. Queued time counts: on
/// a loaded machine a computing consumer runs less than it wants, but it does not sleep.
inline constexpr double kMainBusyCpuPct = 80.0;

void rule_main_process_bound(const JobView& job, std::vector<report::Finding>& out) {
  if (!job.main_process.cpu_pct) return;
  const double wants_cpu =
      *job.main_process.cpu_pct + job.main_process.runq_delay_pct.value_or(0.0);
  if (wants_cpu < kMainBusyCpuPct) return;
  const LoaderView* worst = nullptr;  // the loader with the highest stall
  int judged = 0;
  for (const LoaderView& l : job.loaders) {
    if (stalled(l)) return;  // part of the job is data-bound: other rules speak
    if (!keeps_up(l)) continue;
    ++judged;
    if (!worst || *l.data_stall_fraction > *worst->data_stall_fraction) worst = &l;
  }
  if (!worst) return;

  const double stall = *worst->data_stall_fraction;
  const double cpu = *job.main_process.cpu_pct;
  report::Finding f;
  f.id = "main_process_bound";
  f.severity = report::Severity::kInfo;
  f.loader = judged == 1 ? worst->loader : -1;
  f.score = 1.0 - stall;
  f.title = "The DataLoader keeps up: the main process (training step) is the limit";
  f.add("data_stall_fraction", stall);
  f.add("main_process_cpu_pct", cpu);
  if (worst->step_mean_s) f.add("consumer_step_ms", *worst->step_mean_s * 1e3);
  if (worst->wait_mean_s) f.add("wait_per_batch_ms", *worst->wait_mean_s * 1e3);
  if (worst->batches_per_s) f.add("consumer_batches_per_s", *worst->batches_per_s);
  f.add("num_workers", double(worst->config.num_workers));
  f.fix = "Leave the DataLoader as it is: more workers, prefetching or pinning would not speed "
          "this job up. Speed up the step itself: profile the main process (torch.profiler, or "
          "py-spy top --pid " +
          std::to_string(worst->config.main_pid) +
          ") and look for Python work that could move to the GPU, be vectorised, or be done "
          "less often (logging, metrics, .item() calls).";
  f.why = "The main process waited for batches only " + num(stall * 100) +
          "% of the loop and used " + num(cpu) +
          "% of a core: batches are ready before it asks for them, so the time goes into its "
          "own computation.";
  out.push_back(std::move(f));
}

}  // namespace dldoctor::analyze
