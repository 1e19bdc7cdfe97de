// thread_oversubscription: the workers' own thread pools (OpenMP, BLAS, OpenCV) put more
// threads that want a CPU on the usable CPUs than there are CPUs, and the scheduler shows
// them queueing. Never raised on thread counts alone: a pool that sleeps, or caps itself at
// the core count and fits, costs nothing; the proof is the workers' run-queue delay summed
// over their threads (or, unknown, their preemption rate). Fix: cap the pools, with the
// number and the call or variable for each pool found in the workers.
#include <algorithm>
#include <cmath>
#include <set>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {

namespace {

/// Mean threads per worker that want a CPU (running or queued at least
/// sample::kActiveThreadShare of the time) above which the workers run pools. A plain
/// worker shows one; its queue feeder thread wakes only to hand a batch over.
constexpr double kActiveThreadsPerWorker = 1.5;

/// Threads that want a CPU, all workers together, per usable CPU above which the pools
/// oversubscribe. One pool per worker that caps itself at the core count fits (1.0); the
/// margin keeps a pool of exactly the core count, plus a worker thread waking to hand a
/// batch over, from counting.
constexpr double kActiveThreadsPerCpu = 1.5;

/// Run-queue delay of one worker, summed over its threads (% of wall), that proves the
/// pools contend: together its threads wait for a CPU as long as one CPU's whole time.
/// A single-threaded worker can never reach it, however crowded the machine, so the
/// cause is the worker's own threads.
constexpr double kThreadRunQueuePct = 100.0;

/// Involuntary context switches per second per worker that prove it when run-queue delay
/// is unknown: a pool of threads over a few CPUs is preempted thousands of times a second,
/// a single busy thread a few hundred at most on a shared CPU.
constexpr double kThreadInvoluntaryCsPerS = 1000.0;

/// Run-queue delay of the main process (%) above which oversubscribed worker pools count
/// even while the loader keeps up: they slow the training step instead.
constexpr double kMainRunQueuePct = 20.0;

bool has(const std::set<std::string>& libs, const std::string& prefix) {
  for (const std::string& l : libs)
    if (l.rfind(prefix, 0) == 0) return true;
  return false;
}

}  // namespace

void rule_thread_oversubscription(const JobView& job, std::vector<report::Finding>& out) {
  const auto usable = job.usable_cpus();
  if (!usable) return;
  for (const LoaderView& l : job.loaders) {
    if (l.config.num_workers <= 0 || l.worker_pids.empty()) continue;
    const ProcAgg& w = l.fetchers;
    if (!w.active_threads || *w.active_threads < kActiveThreadsPerWorker) continue;
    // Workers alive at once: this loader's count; every loader's for the CPUs to share.
    const int workers = l.config.num_workers;
    const int job_workers = std::max(workers, job.total_workers.value_or(0));
    const double active_total = *w.active_threads * double(workers);
    if (active_total < kActiveThreadsPerCpu * *usable) continue;  // the pools fit the CPUs
    bool proven = false;
    if (w.runq_delay_pct)
      proven = *w.runq_delay_pct >= kThreadRunQueuePct;
    else if (w.involuntary_cs_per_s)
      proven = *w.involuntary_cs_per_s >= kThreadInvoluntaryCsPerS;
    if (!proven) continue;  // many threads, but they do not compete: never on counts alone
    const bool loader_stalls = stalled(l);
    const bool main_queued = job.main_process.runq_delay_pct &&
                             *job.main_process.runq_delay_pct >= kMainRunQueuePct;
    if (!loader_stalls && !main_queued) continue;

    std::set<std::string> libs;
    std::vector<std::pair<std::string, std::string>> env;
    std::optional<int> torch_threads;
    for (const WorkerPools& p : l.worker_pools) {
      for (const std::string& lib : p.pools.libraries) libs.insert(lib);
      for (const auto& kv : p.pools.env)
        if (std::find(env.begin(), env.end(), kv) == env.end()) env.push_back(kv);
      if (p.torch_threads) torch_threads = std::max(torch_threads.value_or(0), *p.torch_threads);
    }
    const int per_worker = std::max(1, int(std::floor(*usable / double(job_workers))));
    const std::string n = std::to_string(per_worker);

    report::Finding f;
    f.id = "thread_oversubscription";
    f.severity = loader_stalls ? report::Severity::kCritical : report::Severity::kWarning;
    f.loader = l.loader;
    const double stall = l.data_stall_fraction.value_or(0);
    // The pools are the root of the slow fetch that slow_getitem sees as well: rank them
    // above it by the share of time their threads queue.
    f.score = stall * (1.0 + std::min(1.0, w.runq_delay_pct.value_or(0) / 100.0 / 4.0)) +
              (loader_stalls ? 0.0 : 0.01);
    f.title = "Loader " + std::to_string(l.loader) + ": " + count_of(workers, "worker") +
              " run " + num(*w.active_threads) + " busy threads each on " +
              count_of(*usable, "usable CPU") + ": their thread pools queue for a CPU";
    if (l.data_stall_fraction) f.add("data_stall_fraction", stall);
    f.add("num_workers", double(workers));
    f.add("usable_cpus", *usable);
    if (w.threads) f.add("threads_per_worker", *w.threads);
    f.add("active_threads_per_worker", *w.active_threads);
    f.add("active_threads_total", active_total);
    if (w.runq_delay_pct) f.add("worker_run_queue_delay_pct", *w.runq_delay_pct);
    if (w.involuntary_cs_per_s) f.add("involuntary_cs_per_s", *w.involuntary_cs_per_s);
    if (w.cpu_pct) {
      f.add("worker_cpu_pct", *w.cpu_pct);
      f.add("cpu_pct_per_active_thread", *w.cpu_pct / *w.active_threads);
    }
    if (job.main_process.runq_delay_pct)
      f.add("main_run_queue_delay_pct", *job.main_process.runq_delay_pct);
    if (torch_threads) f.add("torch_threads", double(*torch_threads));
    std::string lib_text;
    for (const std::string& lib : libs) lib_text += (lib_text.empty() ? "" : ", ") + lib;
    f.add("thread_pools", lib_text.empty() ? std::string("unknown") : lib_text);
    std::string env_text;
    for (const auto& [k, v] : env) env_text += (env_text.empty() ? "" : ", ") + k + "=" + v;
    f.add("pool_env", env_text.empty() ? std::string("none set") : env_text);
    f.add("recommended_threads_per_worker", double(per_worker));

    std::string fix = "Cap each worker's thread pools at " + n + " thread" +
                      (per_worker == 1 ? "" : "s") + " (usable CPUs " + num(*usable) + " / " +
                      count_of(job_workers, "worker") + "): ";
    const bool omp = libs.empty() || has(libs, "OpenMP") || has(libs, "MKL") || torch_threads;
    if (omp) {
      fix += "torch.set_num_threads(" + n + ") for PyTorch's intra-op pool";
      if (torch_threads && *torch_threads > per_worker)
        fix += " (it is " + std::to_string(*torch_threads) +
               " in the workers; PyTorch sets 1 in every worker, so your code or a library "
               "raised it: remove that call, or call torch.set_num_threads(" + n +
               ") after it)";
      else
        fix += " (PyTorch sets 1 in every worker; something in __getitem__ or a library it "
               "calls raises it: remove that call, or call torch.set_num_threads(" + n +
               ") after it)";
      fix += "; ";
    }
    fix += "OMP_NUM_THREADS=" + n + " MKL_NUM_THREADS=" + n + " OPENBLAS_NUM_THREADS=" + n +
           " in the job's environment before it starts (the libraries read them once, when "
           "they load)";
    if (has(libs, "OpenBLAS") || has(libs, "BLIS"))
      fix += "; numpy's BLAS pool is not covered by torch.set_num_threads: "
             "threadpoolctl.threadpool_limits(" + n + ") in worker_init_fn";
    if (has(libs, "OpenCV"))
      fix += "; OpenCV keeps its own pool: cv2.setNumThreads(" + n + ") in worker_init_fn";
    if (has(libs, "TBB"))
      fix += "; TBB: a tbb.global_control / threadpoolctl limit in worker_init_fn";
    fix += ".";
    f.fix = std::move(fix);
    f.why = std::to_string(workers) + " worker processes already split the work across the " +
            count_of(*usable, "usable CPU") + "; each also runs a pool of " +
            num(*w.active_threads) + " threads that want a CPU, " + num(active_total) +
            " in all. They take turns: a worker's threads together wait " +
            num(w.runq_delay_pct.value_or(0)) + "% of the time in the run queue" +
            (w.involuntary_cs_per_s
                 ? " and are preempted " + num(*w.involuntary_cs_per_s) + " times a second"
                 : std::string()) +
            ". A parallel region ends only when its slowest thread does, and a descheduled "
            "thread holds up the rest, which spin-wait for it on the CPUs the working threads "
            "need, so more threads make each fetch slower, not faster. One thread per worker "
            "uses every CPU without the fight.";
    if (!loader_stalls)
      f.why += " The loader keeps up, but the main process waits " +
               num(*job.main_process.runq_delay_pct) + "% of its time for a CPU: the pools "
               "slow the training step.";
    out.push_back(std::move(f));
  }
}

}  // namespace dldoctor::analyze
