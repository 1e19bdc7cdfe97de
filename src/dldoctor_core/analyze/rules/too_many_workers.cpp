// One core stays with the main process; the rest is split in proportion to each loader's
// current count.
#include "dldoctor_core/analyze/rules/too_many_workers.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "dldoctor_core/analyze/capacity.hpp"

namespace dldoctor::analyze {

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

}  // namespace dldoctor::analyze

namespace dldoctor::analyze::too_many_workers {

std::optional<Evidence> detect(const JobView& job) {
  auto o = oversubscription(job);
  if (!o) return std::nullopt;
  const bool measured = o->runq_delay_pct || o->involuntary_cs_per_s;
  if (measured && !o->proven) return std::nullopt;  // more workers than CPUs, not competing

  // The loaders that stall: the oversubscription only matters if the loop waits.
  Evidence e;
  e.over = *o;
  int stalled_loaders = 0, stalled_id = -1;
  for (const LoaderView& l : job.loaders) {
    if (stalled(l)) {
      ++stalled_loaders;
      stalled_id = l.loader;
      e.data_stall_fraction = std::max(e.data_stall_fraction, *l.data_stall_fraction);
    }
    if (l.config.num_workers > 0 && (l.worker_batches > 0 || !l.worker_pids.empty()))
      e.with_workers.emplace_back(l.loader, l.config.num_workers);
  }
  if (stalled_loaders == 0) return std::nullopt;
  e.ranks = job.ranks();
  e.loader = stalled_loaders == 1 && e.with_workers.size() <= 1 ? stalled_id : -1;
  const double queued = o->runq_delay_pct ? std::min(1.0, *o->runq_delay_pct / 100.0) : 0.5;
  e.rank = {o->proven ? report::Severity::kCritical : report::Severity::kWarning,
            report::Tier::kMeasure, e.data_stall_fraction * queued};
  e.worker_cpu_pct = job.all_workers.cpu_pct;
  if (auto b = cpu_budget(job, nullptr); b && b->main_measured) e.budget = b;
  for (const auto& [pid, pct] : job.all_workers.cpu_pct_each)
    e.worker_cpu_pct_each.emplace_back(pid, pct);
  return e;
}

report::Finding finding(const Evidence& e) {
  const Oversubscription& o = e.over;
  // Measured: what the main processes and other processes leave, a whole core per
  // CPU-bound worker; else floor(usable) less a core per main process.
  const auto measured = e.budget;
  const int budget = measured ? measured->workers()
                              : std::max(1, int(std::floor(o.usable_cpus)) - kMainProcessCores);
  int current = 0;
  for (const auto& [id, n] : e.with_workers) current += n;
  std::string fix;
  int recommended_one = -1;
  if (e.with_workers.size() <= 1) {
    recommended_one = budget;
    fix = "Set num_workers=" + std::to_string(budget) +
          (e.with_workers.empty() ? std::string()
                                  : " for loader " + std::to_string(e.with_workers[0].first)) +
          " (now " + std::to_string(o.total_workers) + " worker processes)";
  } else {
    fix = "Split " + std::to_string(budget) + " workers across the loaders:";
    for (const auto& [id, workers] : e.with_workers) {
      int n = std::max(1, int(std::floor(budget * double(workers) / std::max(1, current))));
      fix += " loader " + std::to_string(id) + " num_workers=" + std::to_string(n) + ",";
    }
    fix.back() = ' ';
    fix += "(now " + std::to_string(o.total_workers) + " worker processes in all)";
  }
  fix += measured ? ": " + cpu_budget_text(*measured) +
                        ", computed from the CPUs this job may use, never from os.cpu_count()."
                  : ": floor(usable CPUs " + num(o.usable_cpus) +
                        ") - 1, computed from the CPUs this job may use, never from "
                        "os.cpu_count().";

  // Every rank runs the same script: one num_workers for each rank's loader, the usable
  // CPUs less a core per rank's main process, shared by the ranks (what `dldoctor check
  // --ranks` prescribes).
  int per_rank = -1;
  if (e.ranks > 1) {
    per_rank =
        std::max(1, (int(std::floor(o.usable_cpus)) - e.ranks * kMainProcessCores) / e.ranks);
    fix = "Set num_workers=" + std::to_string(per_rank) + " in each rank's loader (" +
          std::to_string(e.ranks) + " ranks on this node, now " + std::to_string(o.total_workers) +
          " worker processes in all): (floor(usable CPUs " + num(o.usable_cpus) +
          ") - 1 per rank for its main process) / " + std::to_string(e.ranks) +
          " ranks, computed from the CPUs this job may use, never from os.cpu_count().";
    if (e.ranks * (per_rank + kMainProcessCores) > int(std::floor(o.usable_cpus)))
      fix +=
          " Even that oversubscribes: run fewer ranks on this node or give the job more "
          "CPUs.";
  }

  report::Finding f = report::make_finding("too_many_workers", e.loader, e.rank);
  f.title = std::to_string(o.total_workers) + " DataLoader workers" +
            (e.ranks > 1 ? " of " + std::to_string(e.ranks) + " ranks" : std::string()) +
            " share " + count_of(o.usable_cpus, "usable CPU") +
            (o.proven ? ": they queue for a CPU instead of working"
                      : " (contention could not be measured)");
  f.add("data_stall_fraction", e.data_stall_fraction);
  f.add("total_workers", double(o.total_workers));
  f.add("usable_cpus", o.usable_cpus);
  if (o.runq_delay_pct)
    f.add("run_queue_delay_pct", *o.runq_delay_pct);
  else
    f.add("run_queue_delay_pct", std::string("unknown"));
  if (o.involuntary_cs_per_s) f.add("involuntary_cs_per_s", *o.involuntary_cs_per_s);
  if (e.worker_cpu_pct) f.add("worker_cpu_pct", *e.worker_cpu_pct);
  if (!e.worker_cpu_pct_each.empty()) {
    std::string each;
    for (const auto& [pid, pct] : e.worker_cpu_pct_each)
      each += (each.empty() ? "" : ", ") + std::to_string(pid) + ": " + num(pct) + "%";
    f.add("worker_cpu_pct_each", each);
  }
  if (per_rank > 0) {
    f.add("ranks", double(e.ranks));
    f.add("recommended_num_workers_per_rank", double(per_rank));
  } else if (recommended_one > 0) {
    f.add("recommended_num_workers", double(recommended_one));
  }
  if (measured && measured->main_measured) {
    f.add("main_process_cpu_cores", measured->main_cores);
    if (measured->other_cores) f.add("other_processes_cpu_cores", *measured->other_cores);
    f.add("cpu_left_for_workers", measured->left());
  }
  f.fix = std::move(fix);
  f.why = std::to_string(o.total_workers) + " worker processes compete for " +
          count_of(o.usable_cpus, "usable CPU") + " (affinity and cgroup quota)" +
          (o.runq_delay_pct
               ? ", so each waits " + num(*o.runq_delay_pct) + "% of its time in the run queue"
               : std::string()) +
          (o.involuntary_cs_per_s
               ? " and is preempted " + num(*o.involuntary_cs_per_s) + " times a second"
               : std::string()) +
          ": they take turns instead of working in parallel, and every switch costs cache "
          "warmth and memory. " +
          (measured && measured->main_measured
               ? std::string("The main process keeps the CPU it was measured using, because "
                             "it unpickles every batch and runs the training step; a worker "
                             "taking it slows every step. ")
               : std::string("One CPU is left to the main process because it unpickles every "
                             "batch and runs the training step; a worker on its CPU slows "
                             "every step. ")) +
          "os.cpu_count() counts every CPU of the machine even when taskset, affinity or a "
          "container quota allow fewer.";
  if (!o.proven)
    f.why +=
        " The sampler could not read run-queue delay or context switches, so the "
        "contention itself is not proven.";
  return f;
}

}  // namespace dldoctor::analyze::too_many_workers
