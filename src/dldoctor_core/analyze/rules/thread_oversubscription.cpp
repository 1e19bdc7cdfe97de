// A parallel region ends only when its slowest thread does: more threads than CPUs make each
// fetch slower, not faster, so the cap is the usable CPUs shared out over the workers.
#include "dldoctor_core/analyze/rules/thread_oversubscription.hpp"

#include <algorithm>
#include <cmath>

#include "dldoctor_core/analyze/data_bound.hpp"
#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::thread_oversubscription {

namespace {

bool has(const std::set<std::string>& libs, const std::string& prefix) {
  for (const std::string& l : libs)
    if (l.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

std::vector<Evidence> detect(const JobView& job) {
  std::vector<Evidence> out;
  const auto usable = job.usable_cpus();
  if (!usable) return out;
  for (const LoaderView& l : job.loaders) {
    if (l.config.num_workers <= 0 || l.worker_pids.empty()) continue;
    const ProcAgg& w = l.fetchers;
    if (!w.active_threads || *w.active_threads < kActiveThreadsPerWorker) continue;
    Evidence e;
    // Workers alive at once: this loader's count; every loader's for the CPUs to share.
    e.workers = l.config.num_workers;
    e.job_workers = std::max(e.workers, job.total_workers.value_or(0));
    e.active_total = *w.active_threads * double(e.workers);
    if (e.active_total < kActiveThreadsPerCpu * *usable) continue;  // the pools fit the CPUs
    bool proven = false;
    if (w.runq_delay_pct)
      proven = *w.runq_delay_pct >= kThreadRunQueuePct;
    else if (w.involuntary_cs_per_s)
      proven = *w.involuntary_cs_per_s >= kThreadInvoluntaryCsPerS;
    if (!proven) continue;  // many threads, but they do not compete: never on counts alone
    e.loader_stalls = stalled(l);
    const bool main_queued =
        job.main_process.runq_delay_pct && *job.main_process.runq_delay_pct >= kMainRunQueuePct;
    if (!e.loader_stalls && !main_queued) continue;

    e.loader = l.loader;
    e.usable_cpus = *usable;
    e.data_stall_fraction = l.data_stall_fraction;
    e.pools = w;
    e.main_run_queue_delay_pct = job.main_process.runq_delay_pct;
    for (const WorkerPools& p : l.worker_pools) {
      for (const std::string& lib : p.pools.libraries) e.libraries.insert(lib);
      for (const auto& kv : p.pools.env)
        if (std::find(e.env.begin(), e.env.end(), kv) == e.env.end()) e.env.push_back(kv);
      if (p.torch_threads)
        e.torch_threads = std::max(e.torch_threads.value_or(0), *p.torch_threads);
    }
    e.per_worker = std::max(1, int(std::floor(*usable / double(e.job_workers))));
    const double stall = l.data_stall_fraction.value_or(0);
    // The pools are the root of the slow fetch that slow_getitem sees as well: rank them
    // above it by the share of time their threads queue.
    e.rank = {e.loader_stalls ? report::Severity::kCritical : report::Severity::kWarning,
              report::Tier::kMeasure,
              stall * (1.0 + std::min(1.0, w.runq_delay_pct.value_or(0) / 100.0 / 4.0)) +
                  (e.loader_stalls ? 0.0 : kMainQueuedScore)};
    out.push_back(std::move(e));
  }
  return out;
}

report::Finding finding(const Evidence& e) {
  const ProcAgg& w = e.pools;
  const std::string n = std::to_string(e.per_worker);
  report::Finding f = report::make_finding("thread_oversubscription", e.loader, e.rank);
  f.title = "Loader " + std::to_string(e.loader) + ": " + count_of(e.workers, "worker") + " run " +
            num(*w.active_threads) + " busy threads each on " +
            count_of(e.usable_cpus, "usable CPU") + ": their thread pools queue for a CPU";
  if (e.data_stall_fraction) f.add("data_stall_fraction", *e.data_stall_fraction);
  f.add("num_workers", double(e.workers));
  f.add("usable_cpus", e.usable_cpus);
  if (w.threads) f.add("threads_per_worker", *w.threads);
  f.add("active_threads_per_worker", *w.active_threads);
  f.add("active_threads_total", e.active_total);
  if (w.runq_delay_pct) f.add("worker_run_queue_delay_pct", *w.runq_delay_pct);
  if (w.involuntary_cs_per_s) f.add("involuntary_cs_per_s", *w.involuntary_cs_per_s);
  if (w.cpu_pct) {
    f.add("worker_cpu_pct", *w.cpu_pct);
    f.add("cpu_pct_per_active_thread", *w.cpu_pct / *w.active_threads);
  }
  if (e.main_run_queue_delay_pct) f.add("main_run_queue_delay_pct", *e.main_run_queue_delay_pct);
  if (e.torch_threads) f.add("torch_threads", double(*e.torch_threads));
  std::string lib_text;
  for (const std::string& lib : e.libraries) lib_text += (lib_text.empty() ? "" : ", ") + lib;
  f.add("thread_pools", lib_text.empty() ? std::string("unknown") : lib_text);
  std::string env_text;
  for (const auto& [k, v] : e.env) env_text += (env_text.empty() ? "" : ", ") + k + "=" + v;
  f.add("pool_env", env_text.empty() ? std::string("none set") : env_text);
  f.add("recommended_threads_per_worker", double(e.per_worker));

  const auto& libs = e.libraries;
  std::string fix = "Cap each worker's thread pools at " + n + " thread" +
                    (e.per_worker == 1 ? "" : "s") + " (usable CPUs " + num(e.usable_cpus) + " / " +
                    count_of(e.job_workers, "worker") + "): ";
  const bool omp = libs.empty() || has(libs, "OpenMP") || has(libs, "MKL") || e.torch_threads;
  if (omp) {
    fix += "torch.set_num_threads(" + n + ") for PyTorch's intra-op pool";
    if (e.torch_threads && *e.torch_threads > e.per_worker)
      fix += " (it is " + std::to_string(*e.torch_threads) +
             " in the workers; PyTorch sets 1 in every worker, so your code or a library "
             "raised it: remove that call, or call torch.set_num_threads(" +
             n + ") after it)";
    else
      fix +=
          " (PyTorch sets 1 in every worker; something in __getitem__ or a library it "
          "calls raises it: remove that call, or call torch.set_num_threads(" +
          n + ") after it)";
    fix += "; ";
  }
  fix += "OMP_NUM_THREADS=" + n + " MKL_NUM_THREADS=" + n + " OPENBLAS_NUM_THREADS=" + n +
         " in the job's environment before it starts (the libraries read them once, when "
         "they load)";
  if (has(libs, "OpenBLAS") || has(libs, "BLIS"))
    fix +=
        "; numpy's BLAS pool is not covered by torch.set_num_threads: "
        "threadpoolctl.threadpool_limits(" +
        n + ") in worker_init_fn";
  if (has(libs, "OpenCV"))
    fix += "; OpenCV keeps its own pool: cv2.setNumThreads(" + n + ") in worker_init_fn";
  if (has(libs, "TBB"))
    fix += "; TBB: a tbb.global_control / threadpoolctl limit in worker_init_fn";
  fix += ".";
  f.fix = std::move(fix);
  f.why = std::to_string(e.workers) + " worker processes already split the work across the " +
          count_of(e.usable_cpus, "usable CPU") + "; each also runs a pool of " +
          num(*w.active_threads) + " threads that want a CPU, " + num(e.active_total) +
          " in all. They take turns: a worker's threads together wait " +
          num(w.runq_delay_pct.value_or(0)) + "% of the time in the run queue" +
          (w.involuntary_cs_per_s
               ? " and are preempted " + num(*w.involuntary_cs_per_s) + " times a second"
               : std::string()) +
          ". A parallel region ends only when its slowest thread does, and a descheduled "
          "thread holds up the rest, which spin-wait for it on the CPUs the working threads "
          "need, so more threads make each fetch slower, not faster. One thread per worker "
          "uses every CPU without the fight.";
  if (!e.loader_stalls)
    f.why += " The loader keeps up, but the main process waits " +
             num(*e.main_run_queue_delay_pct) +
             "% of its time for a CPU: the pools "
             "slow the training step.";
  return f;
}

}  // namespace dldoctor::analyze::thread_oversubscription
