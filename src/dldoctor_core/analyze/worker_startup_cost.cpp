// worker_startup_cost: the time from an iterator's creation to its first batch, paid again
// every epoch when the workers are not persistent (a fresh interpreter and a fresh copy of the
// dataset per worker under spawn/forkserver), is a large share of each epoch. Fix:
// persistent_workers=True, a dataset that is light to pickle, or fork where it is safe.
#include <algorithm>
#include <cmath>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

/// Share of the epochs' wall time spent restarting workers at which the restarts count:
/// below a tenth, persistent workers would buy back less than the noise of the epochs.
constexpr double kStartupShare = 0.10;

/// Share at which the restarts are the bottleneck of the run (critical).
constexpr double kStartupCriticalShare = 0.25;

/// Start-up per restart below which it is not worth a finding, whatever the share: forked
/// workers of a light dataset start in tens of milliseconds, and a run of very short
/// epochs would otherwise show a large share of nothing.
constexpr double kMinStartupS = 0.1;

/// Pickled dataset size from which spawn/forkserver pickling is named as a cost of its own:
/// it is sent to every worker and unpickled there at each start, at roughly 100-500 MB/s.
constexpr double kHeavyPickleBytes = 16 * kMiB;

struct EpochCost {
  int64_t ordinal = 0;
  double latency_s = 0;
  double overhead_s = 0;  // latency beyond one batch's fetch
  double wall_s = 0;
  bool restart = false;   // workers started afresh for it (not its loader's first)
};

}  // namespace

void rule_worker_startup_cost(const JobView& job, std::vector<report::Finding>& out) {
  for (const LoaderView& l : job.loaders) {
    if (l.config.num_workers <= 0 || l.epochs.empty()) continue;
    const double fetch_s = l.fetch_p50_ms.value_or(0) / 1e3;
    std::vector<EpochCost> epochs;
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
      c.overhead_s = std::max(0.0, c.latency_s - fetch_s);
      c.wall_s = std::max(double(end - ep.start_ns) / 1e9, c.latency_s);
      c.restart = ep.ordinal > 1 && !(ep.flags & trace::kPersistentWorkers);
      epochs.push_back(c);
    }
    if (epochs.empty()) continue;
    double wall = 0, restart_overhead = 0, first_overhead = 0;
    int restarts = 0;
    for (const EpochCost& c : epochs) {
      wall += c.wall_s;
      if (c.restart) {
        restart_overhead += c.overhead_s;
        ++restarts;
      } else if (c.ordinal == 1) {
        first_overhead = c.overhead_s;
      }
    }
    if (wall <= 0) continue;
    const double restart_share = restart_overhead / wall;
    const double first_share = first_overhead / wall;
    const bool spawned = l.config.start_method == trace::StartMethod::kSpawn ||
                         l.config.start_method == trace::StartMethod::kForkserver;
    std::optional<int64_t> pickled;
    if (l.dataset) pickled = l.dataset->pickled_bytes;
    const bool heavy = spawned && pickled && double(*pickled) >= kHeavyPickleBytes;

    const bool repeated = restarts > 0 && restart_share >= kStartupShare &&
                          restart_overhead / restarts >= kMinStartupS;
    // One start-up only (persistent workers, or a single epoch): a cost the run pays once,
    // named (as info) only when spawning a heavy dataset makes it a large part of the run.
    const bool once = !repeated && heavy && first_share >= kStartupShare &&
                      first_overhead >= kMinStartupS;
    if (!repeated && !once) continue;

    report::Finding f;
    f.id = "worker_startup_cost";
    f.loader = l.loader;
    f.severity = !repeated                              ? report::Severity::kInfo
                 : restart_share >= kStartupCriticalShare ? report::Severity::kCritical
                                                          : report::Severity::kWarning;
    f.score = repeated ? restart_share : first_share * 0.1;
    const double per_restart = restarts ? restart_overhead / restarts : 0;
    const std::string method = l.config.start_method == trace::StartMethod::kSpawn ? "spawn"
                               : l.config.start_method == trace::StartMethod::kForkserver
                                   ? "forkserver"
                               : l.config.start_method == trace::StartMethod::kFork ? "fork"
                                                                                     : "unknown";
    if (repeated)
      f.title = "Loader " + std::to_string(l.loader) + ": workers restart every epoch, " +
                num(per_restart) + " s each time before the first batch (" +
                num(restart_share * 100) + "% of the epochs)";
    else
      f.title = "Loader " + std::to_string(l.loader) + ": starting the workers took " +
                num(first_overhead) + " s (" + num(first_share * 100) +
                "% of the run so far), the dataset pickled to " +
                num(double(*pickled) / kMiB) + " MiB per worker";
    f.add("epochs", double(epochs.size()));
    f.add("restarts", double(restarts));
    std::string each;
    for (size_t i = 0; i < epochs.size() && i < 12; ++i)
      each += (i ? ", " : "") + std::to_string(epochs[i].ordinal) + ": " +
              std::to_string(std::lround(epochs[i].latency_s * 1e3));
    if (epochs.size() > 12) each += ", ...";
    f.add("first_batch_latency_ms_each", each);
    if (restarts) f.add("startup_s_per_restart", per_restart);
    f.add("first_epoch_startup_s", first_overhead);
    f.add("epoch_s_mean", wall / double(epochs.size()));
    f.add("startup_share", repeated ? restart_share : first_share);
    if (l.fetch_p50_ms) f.add("fetch_p50_ms", *l.fetch_p50_ms);
    f.add("start_method", method);
    f.add("persistent_workers", l.config.persistent_workers() ? 1.0 : 0.0);
    f.add("num_workers", double(l.config.num_workers));
    if (pickled) {
      f.add("pickled_dataset_mib", double(*pickled) / kMiB);
      if (!l.dataset->pickle_complete) f.add("pickled_dataset_note", std::string("at least (measurement cut at its time budget)"));
      if (spawned)
        f.add("pickled_per_start_mib", double(*pickled) * l.config.num_workers / kMiB);
    }

    std::string fix;
    if (repeated)
      fix = "Set persistent_workers=True: the workers and the dataset copy each holds then "
            "live across epochs, and only the first epoch pays the start-up (about " +
            num(restart_overhead) + " s over these " + std::to_string(restarts) +
            " restarts, " + num(restart_share * 100) + "% of the epochs).";
    if (heavy) {
      fix += std::string(fix.empty() ? "" : " ") + "Make the dataset lighter to send: under " +
             method + " it is pickled for each of the " + count_of(l.config.num_workers, "worker") +
             " at every start (" + num(double(*pickled) / kMiB) +
             " MiB each) and unpickled there; keep only light state in it (file paths, "
             "offsets) and open or load the data lazily in the worker (in worker_init_fn or "
             "the first __getitem__), or use multiprocessing_context='fork' if the main "
             "process has not initialized CUDA or started threads that hold locks.";
    } else if (spawned && !repeated) {
      fix += " Or use multiprocessing_context='fork' where it is safe.";
    }
    if (spawned && repeated && !heavy)
      fix += " Under " + method + " each worker also starts a fresh interpreter and imports "
             "torch: multiprocessing_context='fork' starts in milliseconds where it is safe "
             "(no CUDA initialized and no lock-holding threads in the main process).";
    f.fix = std::move(fix);
    f.why = std::string(repeated
                            ? "With persistent_workers=False every epoch's iterator starts "
                              "its workers anew and shuts them down at the end: "
                            : "") +
            (spawned ? "under " + method +
                           " each worker is a new interpreter that imports torch and "
                           "unpickles its own copy of the dataset before it can fetch"
                     : "each worker is forked and runs its start-up before it can fetch") +
            ", and the loop waits for all of it before its first batch. " +
            (repeated ? "Here that took " + num(per_restart) + " s per epoch against " +
                            num(wall / double(epochs.size())) +
                            " s per epoch in all: time no batch is produced."
                      : "The cost is paid once per run here; it matters for short runs and "
                        "for jobs that create loaders often.");
    out.push_back(std::move(f));
  }
}

}  // namespace dldoctor::analyze
