// too_many_workers (seed cause 1): more worker processes than usable CPUs, and the
// scheduler shows them queueing for a CPU. The fix is a number from the usable CPUs.
#include <algorithm>
#include <cmath>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {

/// Mean run-queue delay of the workers (% of wall time runnable but not running) that
/// proves contention. A fifth of the time queued costs a fifth of the workers' throughput;
/// on a machine with a CPU per worker it stays in the low single digits.
inline constexpr double kRunQueueDelayPct = 20.0;

/// Involuntary context switches per second per worker that prove contention when the
/// run-queue delay is unknown (no schedstat). The scheduler preempts a CPU-bound task that
/// shares its CPU every few milliseconds (hundreds per second); one with a CPU to itself
/// is preempted only by the odd kernel thread, well under this.
inline constexpr double kInvoluntaryCsPerS = 30.0;

std::optional<Oversubscription> oversubscription(const JobView& job) noexcept {
  auto usable = job.usable_cpus();
  if (!usable || !job.total_workers || double(*job.total_workers) <= *usable) return std::nullopt;
  Oversubscription o;
  o.total_workers = *job.total_workers;
  o.usable_cpus = *usable;
  o.runq_delay_pct = job.all_workers.runq_delay_pct;
  o.involuntary_cs_per_s = job.all_workers.involuntary_cs_per_s;
  if (o.runq_delay_pct)
    o.proven = *o.runq_delay_pct >= kRunQueueDelayPct;
  else if (o.involuntary_cs_per_s)
    o.proven = *o.involuntary_cs_per_s >= kInvoluntaryCsPerS;
  return o;
}

void rule_too_many_workers(const JobView& job, std::vector<report::Finding>& out) {
  auto o = oversubscription(job);
  if (!o) return;
  const bool measured = o->runq_delay_pct || o->involuntary_cs_per_s;
  if (measured && !o->proven) return;  // more workers than CPUs, but they do not compete

  // The loaders that stall: the oversubscription only matters if the loop waits.
  std::vector<const LoaderView*> stalled_loaders, with_workers;
  double stall = 0;
  for (const LoaderView& l : job.loaders) {
    if (stalled(l)) {
      stalled_loaders.push_back(&l);
      stall = std::max(stall, *l.data_stall_fraction);
    }
    if (l.config.num_workers > 0 && (l.worker_batches > 0 || !l.worker_pids.empty()))
      with_workers.push_back(&l);
  }
  if (stalled_loaders.empty()) return;

  // One core stays with the main process; the rest is split in proportion to each
  // loader's current count.
  const int budget = std::max(1, int(std::floor(o->usable_cpus)) - 1);
  int current = 0;
  for (const LoaderView* l : with_workers) current += l->config.num_workers;
  std::string fix;
  int recommended_one = -1;
  if (with_workers.size() <= 1) {
    recommended_one = budget;
    fix = "Set num_workers=" + std::to_string(budget) +
          (with_workers.empty() ? std::string()
                                : " for loader " + std::to_string(with_workers[0]->loader)) +
          " (now " + std::to_string(o->total_workers) + " worker processes)";
  } else {
    fix = "Split " + std::to_string(budget) + " workers across the loaders:";
    for (const LoaderView* l : with_workers) {
      int n = std::max(1, int(std::floor(budget * double(l->config.num_workers) /
                                         std::max(1, current))));
      fix += " loader " + std::to_string(l->loader) + " num_workers=" + std::to_string(n) + ",";
    }
    fix.back() = ' ';
    fix += "(now " + std::to_string(o->total_workers) + " worker processes in all)";
  }
  fix += ": floor(usable CPUs " + num(o->usable_cpus) +
         ") - 1, computed from the CPUs this job may use, never from os.cpu_count().";

  report::Finding f;
  f.id = "too_many_workers";
  f.severity = o->proven ? report::Severity::kCritical : report::Severity::kWarning;
  f.loader = stalled_loaders.size() == 1 && with_workers.size() <= 1
                 ? stalled_loaders[0]->loader
                 : -1;
  const double queued = o->runq_delay_pct ? std::min(1.0, *o->runq_delay_pct / 100.0) : 0.5;
  f.score = stall * queued;
  f.title = std::to_string(o->total_workers) + " DataLoader workers share " +
            count_of(o->usable_cpus, "usable CPU") +
            (o->proven ? ": they queue for a CPU instead of working"
                       : " (contention could not be measured)");
  f.add("data_stall_fraction", stall);
  f.add("total_workers", double(o->total_workers));
  f.add("usable_cpus", o->usable_cpus);
  if (o->runq_delay_pct)
    f.add("run_queue_delay_pct", *o->runq_delay_pct);
  else
    f.add("run_queue_delay_pct", std::string("unknown"));
  if (o->involuntary_cs_per_s) f.add("involuntary_cs_per_s", *o->involuntary_cs_per_s);
  if (job.all_workers.cpu_pct) f.add("worker_cpu_pct", *job.all_workers.cpu_pct);
  if (!job.all_workers.cpu_pct_each.empty()) {
    std::string each;
    for (const auto& [pid, pct] : job.all_workers.cpu_pct_each)
      each += (each.empty() ? "" : ", ") + std::to_string(pid) + ": " + num(pct) + "%";
    f.add("worker_cpu_pct_each", each);
  }
  if (recommended_one > 0) f.add("recommended_num_workers", double(recommended_one));
  f.fix = std::move(fix);
  f.why = std::to_string(o->total_workers) + " worker processes compete for " +
          count_of(o->usable_cpus, "usable CPU") + " (affinity and cgroup quota)" +
          (o->runq_delay_pct ? ", so each waits " + num(*o->runq_delay_pct) +
                                   "% of its time in the run queue"
                             : std::string()) +
          (o->involuntary_cs_per_s ? " and is preempted " + num(*o->involuntary_cs_per_s) +
                                         " times a second"
                                   : std::string()) +
          ": they take turns instead of working in parallel, and every switch costs cache "
          "warmth and memory. One CPU is left to the main process because it unpickles every "
          "batch and runs the training step; a worker on its CPU slows every step. "
          "os.cpu_count() counts every CPU of the machine even when taskset, affinity or a "
          "container quota allow fewer.";
  if (!o->proven)
    f.why += " The sampler could not read run-queue delay or context switches, so the "
             "contention itself is not proven.";
  out.push_back(std::move(f));
}

}  // namespace dldoctor::analyze
