// fd_limit: under torch's default file_descriptor sharing strategy every tensor storage in
// flight is an open descriptor, in the worker that made it and in the main process that
// receives it. A loader passing many tensors per batch runs into RLIMIT_NOFILE: a worker
// cannot send its batch ("Too many open files", printed, the batch lost, the main process
// waiting forever) or the main process cannot receive one ("received 0 items of
// ancdata"). Confirmed by that text, predicted by descriptor counts near the limit.
#include <algorithm>
#include <cmath>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"
#include "dldoctor_core/analyze/verdict.hpp"

namespace dldoctor::analyze {

/// A job process with this share of RLIMIT_NOFILE open is one burst of batches away from
/// the limit: the count moves with the batches in flight, and the sampler reads it only
/// every few seconds, between the peaks.
inline constexpr double kFdNearLimitFraction = 0.8;

/// The smallest limit worth prescribing: the one `dldoctor check` asks for, room for a
/// detection-style loader (64 samples x 3 tensors x 4 workers x prefetch 2 = 1536 fds)
/// beside the dataset's own files.
inline constexpr int64_t kFdRecommendedMin = 8192;

/// Score of the warning near the limit: a failure to come ranks with a bottleneck that
/// explains most of the stall (a share of 0.8), above a lesser one.
inline constexpr double kNearLimitScore = 0.8;

/// Headroom of the prescribed limit over the most descriptors seen at once.
inline constexpr int64_t kFdHeadroom = 4;

namespace {

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v && p < (int64_t(1) << 40)) p <<= 1;
  return p;
}

}  // namespace

void rule_fd_limit(const JobView& job, std::vector<report::Finding>& out) {
  const RuntimeNote* rt = job.failures.job_runtime();
  // The job's own limit (its main process's, which workers inherit), else the watcher's:
  // a job usually inherits it.
  std::optional<int64_t> soft = rt && (rt->nofile_soft || rt->nofile_unlimited)
                                    ? rt->nofile_soft
                                    : job.facts.limits.nofile_soft;
  std::optional<int64_t> hard = rt && (rt->nofile_soft || rt->nofile_unlimited)
                                    ? rt->nofile_hard
                                    : job.facts.limits.nofile_hard;
  const std::string strategy = rt ? rt->sharing_strategy : std::string();

  const ErrorNote* err = nullptr;
  int64_t errors = 0;
  bool emfile = false;  // "Too many open files" itself, not only a failed fd hand-over
  int64_t lost = 0;     // batches a worker could not send
  for (const ErrorNote& e : job.failures.errors)
    if (classify_error(e.type, e.message) == ErrorKind::kTooManyOpenFiles) {
      const bool own = e.message.find("ancdata") == std::string::npos;
      if (!err || (own && !emfile)) err = &e;
      emfile = emfile || own;
      errors += e.count;
      if (e.source == ErrorSource::kQueueFeeder) lost += e.count;
    }
  // "received 0 items of ancdata" alone is also what the main process sees when the worker
  // handing it a descriptor dies in the middle: with a dead worker, that is worker_died's.
  if (err && !emfile && !job.failures.deaths.empty()) err = nullptr;

  // The most descriptors any job process held at once, as sampled.
  std::optional<int64_t> peak;
  int peak_pid = 0;
  for (const ProcAgg* a : {&job.main_process, &job.all_workers})
    if (a->open_fds_max && (!peak || *a->open_fds_max > *peak)) {
      peak = a->open_fds_max;
      peak_pid = a->open_fds_max_pid;
    }
  const bool fd_strategy = strategy.empty() || strategy == "file_descriptor";
  const bool near = fd_strategy && soft && *soft > 0 && peak &&
                    double(*peak) >= kFdNearLimitFraction * double(*soft);
  if (!err && !near) return;

  report::Finding f;
  f.id = "fd_limit";
  f.severity = err ? report::Severity::kCritical : report::Severity::kWarning;
  // Descriptors that ran out are the job's failure; near the limit, a risk ranked by score.
  if (err) f.tier = report::Tier::kFailure;
  f.score = err ? 0.0 : kNearLimitScore;
  f.loader = err ? err->loader : -1;
  if (err)
    f.title = "The job ran out of file descriptors (RLIMIT_NOFILE " +
              (soft ? std::to_string(*soft) : std::string("unknown")) +
              "): batches could not be passed between processes";
  else
    f.title = "A job process holds " + std::to_string(*peak) + " of its " +
              std::to_string(*soft) + " file descriptors: batches will soon fail to pass";
  if (soft) f.add("nofile_soft", double(*soft));
  if (hard) f.add("nofile_hard", double(*hard));
  else if (soft) f.add("nofile_hard", std::string("unlimited"));
  if (peak) {
    f.add("open_fds_peak", double(*peak));
    if (peak_pid) f.add("open_fds_peak_pid", double(peak_pid));
  }
  f.add("sharing_strategy", strategy.empty() ? std::string("unknown (torch's default on Linux "
                                                           "is file_descriptor)")
                                             : strategy);
  if (err) {
    f.add("error", error_line(err->message, ErrorKind::kTooManyOpenFiles));
    f.add("errors", double(errors));
    if (lost > 0) f.add(kBatchesLost, double(lost));
  }

  const int64_t base = std::max(peak.value_or(0), soft.value_or(0));
  int64_t target = std::max(kFdRecommendedMin, next_pow2(base * kFdHeadroom));
  const bool hard_caps = hard && *hard < target;
  f.add("recommended_nofile", double(target));
  f.fix = "Raise the open-file limit to " + std::to_string(target) + " before the job starts: "
          "ulimit -n " + std::to_string(target) +
          (hard_caps ? " (above the hard limit " + std::to_string(*hard) +
                           ": needs root, or Docker --ulimit nofile=" + std::to_string(target) +
                           ":" + std::to_string(target) + ", or LimitNOFILE= in a systemd unit)"
                     : std::string(" (Docker: --ulimit nofile=") + std::to_string(target) + ":" +
                           std::to_string(target) + "; systemd: LimitNOFILE=)") +
          ", or resource.setrlimit(resource.RLIMIT_NOFILE, ...) at the top of the script. Or "
          "call torch.multiprocessing.set_sharing_strategy('file_system') before creating the "
          "DataLoader: tensors then travel as named files in /dev/shm and hold no descriptor, "
          "but a process that dies can leave its files in /dev/shm until reboot. Returning "
          "fewer, larger tensors per batch (stack the per-sample tensors in collate_fn) also "
          "needs fewer descriptors.";
  if (!fd_strategy)
    f.fix = "Raise the open-file limit: ulimit -n " + std::to_string(target) +
            " before the job starts (the sharing strategy is already " + strategy +
            ", so the descriptors are the job's own files and sockets).";
  f.why = "torch's default sharing strategy on Linux (file_descriptor) sends each tensor "
          "storage of a batch as an open descriptor: the worker holds one per tensor until "
          "the main process has received it, and the main process one per tensor it has not "
          "freed. A batch of many small tensors (uncollated lists, detection targets) times "
          "the batches in flight can pass RLIMIT_NOFILE; then a worker fails to send its batch "
          "(\"Too many open files\", printed by the worker, the batch lost and the main "
          "process waiting for it forever) or the main process fails to receive one "
          "(\"received 0 items of ancdata\").";
  out.push_back(std::move(f));
}

}  // namespace dldoctor::analyze
