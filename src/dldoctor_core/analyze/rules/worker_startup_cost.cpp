// An epoch's start-up is its first-batch latency less one batch's fetch, plus the waits for
// the other workers' first batches (workers that come up one after the other keep the loop
// waiting once each); the epoch ends at the next iterator's start (or its own end), and
// counts as a restart when the workers were not kept.
#include "dldoctor_core/analyze/rules/worker_startup_cost.hpp"

#include <algorithm>
#include <climits>
#include <cmath>

#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::worker_startup_cost {

std::vector<Evidence> detect(const JobView& job) {
  std::vector<Evidence> out;
  for (const LoaderView& l : job.loaders) {
    if (l.config.num_workers <= 0 || l.epochs.empty()) continue;
    const double fetch_s = l.fetch_p50_ms.value_or(0) / 1e3;
    Evidence e;
    for (size_t i = 0; i < l.epochs.size(); ++i) {
      const EpochRecord& ep = l.epochs[i];
      if (!ep.first_batch_latency_ns || ep.num_workers <= 0) continue;
      int64_t end = ep.end_ns.value_or(0);
      if (!end) end = ep.last_batch_ns;
      if (i + 1 < l.epochs.size()) end = std::min(end ? end : INT64_MAX, l.epochs[i + 1].start_ns);
      if (end <= ep.start_ns) continue;
      EpochCost c;
      c.ordinal = ep.ordinal;
      c.latency_s = double(*ep.first_batch_latency_ns) / 1e9;
      c.overhead_s = std::max(0.0, c.latency_s - fetch_s) + double(ep.later_workers_wait_ns) / 1e9;
      c.wall_s = std::max(double(end - ep.start_ns) / 1e9, c.latency_s);
      c.restart = ep.ordinal > 1 && !(ep.flags & trace::kPersistentWorkers);
      e.epochs.push_back(c);
    }
    if (e.epochs.empty()) continue;
    for (const EpochCost& c : e.epochs) {
      e.wall += c.wall_s;
      if (c.restart) {
        e.restart_overhead += c.overhead_s;
        ++e.restarts;
      } else if (c.ordinal == 1) {
        e.first_overhead = c.overhead_s;
      }
    }
    if (e.wall <= 0) continue;
    e.restart_share = e.restart_overhead / e.wall;
    e.first_share = e.first_overhead / e.wall;
    e.spawned = l.config.start_method == trace::StartMethod::kSpawn ||
                l.config.start_method == trace::StartMethod::kForkserver;
    if (l.dataset) {
      e.pickled = l.dataset->pickled_bytes;
      e.pickle_complete = l.dataset->pickle_complete;
    }
    e.heavy = e.spawned && e.pickled && double(*e.pickled) >= kHeavyPickleBytes;

    e.repeated = e.restarts > 0 && e.restart_share >= kStartupShare &&
                 e.restart_overhead / e.restarts >= kMinStartupS;
    // One start-up only (persistent workers, or a single epoch): a cost the run pays once,
    // named (as info) only when spawning a heavy dataset makes it a large part of the run.
    const bool once = !e.repeated && e.heavy && e.first_share >= kStartupShare &&
                      e.first_overhead >= kMinStartupS;
    if (!e.repeated && !once) continue;

    e.loader = l.loader;
    e.rank.severity = !e.repeated                                ? report::Severity::kInfo
                      : e.restart_share >= kStartupCriticalShare ? report::Severity::kCritical
                                                                 : report::Severity::kWarning;
    e.rank.score = e.repeated ? e.restart_share : e.first_share * kOnceScoreFactor;
    e.method = l.config.start_method == trace::StartMethod::kSpawn        ? "spawn"
               : l.config.start_method == trace::StartMethod::kForkserver ? "forkserver"
               : l.config.start_method == trace::StartMethod::kFork       ? "fork"
                                                                          : "unknown";
    e.fetch_p50_ms = l.fetch_p50_ms;
    e.persistent = l.config.persistent_workers();
    e.num_workers = l.config.num_workers;
    out.push_back(std::move(e));
  }
  return out;
}

report::Finding finding(const Evidence& e) {
  const double per_restart = e.restarts ? e.restart_overhead / e.restarts : 0;
  const std::string& method = e.method;
  report::Finding f = report::make_finding("worker_startup_cost", e.loader, e.rank);
  if (e.repeated)
    f.title = "Loader " + std::to_string(e.loader) + ": workers restart every epoch, " +
              num(per_restart) + " s each time before their first batches (" +
              num(e.restart_share * 100) + "% of the epochs)";
  else
    f.title = "Loader " + std::to_string(e.loader) + ": starting the workers took " +
              num(e.first_overhead) + " s (" + num(e.first_share * 100) +
              "% of the run so far), the dataset pickled to " + num(double(*e.pickled) / kMiB) +
              " MiB per worker";
  f.add("epochs", double(e.epochs.size()));
  f.add("restarts", double(e.restarts));
  std::string each;
  for (size_t i = 0; i < e.epochs.size() && i < 12; ++i)
    each += (i ? ", " : "") + std::to_string(e.epochs[i].ordinal) + ": " +
            std::to_string(std::lround(e.epochs[i].latency_s * 1e3));
  if (e.epochs.size() > 12) each += ", ...";
  f.add("first_batch_latency_ms_each", each);
  if (e.restarts) f.add("startup_s_per_restart", per_restart);
  f.add("first_epoch_startup_s", e.first_overhead);
  f.add("epoch_s_mean", e.wall / double(e.epochs.size()));
  f.add("startup_share", e.repeated ? e.restart_share : e.first_share);
  if (e.fetch_p50_ms) f.add("fetch_p50_ms", *e.fetch_p50_ms);
  f.add("start_method", method);
  f.add("persistent_workers", e.persistent ? 1.0 : 0.0);
  f.add("num_workers", double(e.num_workers));
  if (e.pickled) {
    f.add("pickled_dataset_mib", double(*e.pickled) / kMiB);
    if (!e.pickle_complete)
      f.add("pickled_dataset_note", std::string("at least (measurement cut at its time budget)"));
    if (e.spawned) f.add("pickled_per_start_mib", double(*e.pickled) * e.num_workers / kMiB);
  }

  std::string fix;
  if (e.repeated)
    fix =
        "Set persistent_workers=True: the workers and the dataset copy each holds then "
        "live across epochs, and only the first epoch pays the start-up (about " +
        num(e.restart_overhead) + " s over these " + std::to_string(e.restarts) + " restarts, " +
        num(e.restart_share * 100) + "% of the epochs).";
  if (e.heavy) {
    fix += std::string(fix.empty() ? "" : " ") + "Make the dataset lighter to send: under " +
           method + " it is pickled for each of the " + count_of(e.num_workers, "worker") +
           " at every start (" + num(double(*e.pickled) / kMiB) +
           " MiB each) and unpickled there; keep only light state in it (file paths, "
           "offsets) and open or load the data lazily in the worker (in worker_init_fn or "
           "the first __getitem__), or use multiprocessing_context='fork' if the main "
           "process has not initialized CUDA or started threads that hold locks.";
  } else if (e.spawned && !e.repeated) {
    fix += " Or use multiprocessing_context='fork' where it is safe.";
  }
  if (e.spawned && e.repeated && !e.heavy)
    fix += " Under " + method +
           " each worker also starts a fresh interpreter and imports "
           "torch: multiprocessing_context='fork' starts in milliseconds where it is safe "
           "(no CUDA initialized and no lock-holding threads in the main process).";
  f.fix = std::move(fix);
  f.why = std::string(e.repeated ? "With persistent_workers=False every epoch's iterator starts "
                                   "its workers anew and shuts them down at the end: "
                                 : "") +
          (e.spawned ? "under " + method +
                           " each worker is a new interpreter that imports torch and "
                           "unpickles its own copy of the dataset before it can fetch"
                     : "each worker is forked and runs its start-up before it can fetch") +
          ", and the loop waits for all of it before its first batch. " +
          (e.repeated ? "Here that took " + num(per_restart) + " s per epoch against " +
                            num(e.wall / double(e.epochs.size())) +
                            " s per epoch in all: time no batch is produced."
                      : "The cost is paid once per run here; it matters for short runs and "
                        "for jobs that create loaders often.");
  return f;
}

}  // namespace dldoctor::analyze::worker_startup_cost
