// The limit of the process that ran out (the one that printed the error, else the one seen
// holding the most descriptors): its own, noted by the hooks or read from /proc at the error
// (a process can lower its own limit: a test's child, a worker_init_fn), else that of the
// loader's main process (workers inherit it), else the job's newest, else the watcher's (a job
// usually inherits it). The limit prescribed is a power of two with kFdHeadroom over the peak.
#include "dldoctor_core/analyze/rules/fd_limit.hpp"

#include <algorithm>

#include "dldoctor_core/analyze/node_share.hpp"
#include "dldoctor_core/analyze/verdict.hpp"

namespace dldoctor::analyze::fd_limit {

namespace {

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v && p < (int64_t(1) << 40)) p <<= 1;
  return p;
}

}  // namespace

std::optional<Evidence> detect(const JobView& job) {
  Evidence e;
  const ErrorNote* err = nullptr;
  bool emfile = false;  // "Too many open files" itself, not only a failed fd hand-over
  for (const ErrorNote& x : job.failures.errors)
    if (classify_error(x.type, x.message) == ErrorKind::kTooManyOpenFiles) {
      const bool own_text = x.message.find("ancdata") == std::string::npos;
      if (!err || (own_text && !emfile)) err = &x;
      emfile = emfile || own_text;
      e.errors += x.count;
      if (x.source == ErrorSource::kQueueFeeder) e.lost += x.count;
    }
  // "received 0 items of ancdata" alone is also what the main process sees when the worker
  // handing it a descriptor dies in the middle: with a dead worker, that is worker_died's.
  if (err && !emfile && !job.failures.deaths.empty()) err = nullptr;

  for (const ProcAgg* a : {&job.main_process, &job.all_workers})
    if (a->open_fds_max && (!e.peak || *a->open_fds_max > *e.peak)) {
      e.peak = a->open_fds_max;
      e.peak_pid = a->open_fds_max_pid;
    }

  const FailureView& fv = job.failures;
  e.pid = err && err->pid > 0 ? err->pid : e.peak_pid;
  const RuntimeNote* main_rt = err ? fv.runtime_of(err->loader) : nullptr;
  if (!main_rt) main_rt = fv.job_runtime();
  const RuntimeNote* rt = fv.limits_of(e.pid);
  if (!rt && main_rt && (main_rt->nofile_soft || main_rt->nofile_unlimited)) rt = main_rt;
  e.soft = rt ? rt->nofile_soft : job.facts.limits.nofile_soft;
  e.hard = rt ? rt->nofile_hard : job.facts.limits.nofile_hard;
  e.own_limit = rt != nullptr && rt->pid == e.pid && e.pid > 0;
  // A limit below the one the job started with (the watcher's, which it inherits) was set
  // by the process itself or the one that started it.
  const auto& started = job.facts.limits.nofile_soft;
  if (e.soft && started && *e.soft < *started) e.started_soft = started;
  e.strategy = main_rt ? main_rt->sharing_strategy : std::string();
  e.fd_strategy = e.strategy.empty() || e.strategy == "file_descriptor";
  const bool near = e.fd_strategy && e.soft && *e.soft > 0 && e.peak &&
                    double(*e.peak) >= kFdNearLimitFraction * double(*e.soft);
  if (!err && !near) return std::nullopt;

  e.failed = err != nullptr;
  // Descriptors that ran out are the job's failure; near the limit, a risk ranked by score.
  e.rank = e.failed
               ? report::Rank{report::Severity::kCritical, report::Tier::kFailure, 0.0}
               : report::Rank{report::Severity::kWarning, report::Tier::kMeasure, kNearLimitScore};
  e.loader = err ? err->loader : -1;
  if (err) e.error = error_line(err->message, ErrorKind::kTooManyOpenFiles);
  const std::vector<RankShare> shares = rank_shares(job);
  if (shares.size() > 1) {
    if (auto i = share_of_pid(shares, e.pid)) e.process_rank = shares[*i].rank;
    e.fds_per_rank = peak_per_share(shares, &ProcAgg::open_fds_peak_sum);
  }
  const int64_t base = std::max(e.peak.value_or(0), e.soft.value_or(0));
  e.recommended = std::max(kFdRecommendedMin, next_pow2(base * kFdHeadroom));
  return e;
}

report::Finding finding(const Evidence& e) {
  report::Finding f = report::make_finding("fd_limit", e.loader, e.rank);
  std::string who = e.pid > 0 ? "process " + std::to_string(e.pid) : "a job process";
  if (e.process_rank >= 0) {
    who += " of rank " + std::to_string(e.process_rank);
    if (f.loader < 0) f.rank = e.process_rank;
  }
  if (e.failed)
    f.title = "The job ran out of file descriptors (" + who + ", RLIMIT_NOFILE " +
              (e.soft ? std::to_string(*e.soft) : std::string("unknown")) +
              "): batches could not be passed between processes";
  else
    f.title = "A job process (" + who + ") holds " + std::to_string(*e.peak) + " of its " +
              std::to_string(*e.soft) + " file descriptors: batches will soon fail to pass";
  if (e.pid > 0) f.add("process_pid", double(e.pid));
  if (e.soft) f.add("nofile_soft", double(*e.soft));
  if (e.hard)
    f.add("nofile_hard", double(*e.hard));
  else if (e.soft)
    f.add("nofile_hard", std::string("unlimited"));
  if (e.started_soft) f.add("job_started_nofile_soft", double(*e.started_soft));
  if (e.peak) {
    f.add("open_fds_peak", double(*e.peak));
    if (e.peak_pid) f.add("open_fds_peak_pid", double(e.peak_pid));
  }
  if (e.process_rank >= 0) f.add("process_rank", double(e.process_rank));
  if (!e.fds_per_rank.empty()) {
    std::string per;
    for (const auto& [name, n] : e.fds_per_rank)
      per += (per.empty() ? "" : ", ") + name + ": " + std::to_string(n);
    f.add("ranks", double(e.fds_per_rank.size()));
    f.add("open_fds_per_rank", per);
  }
  f.add("sharing_strategy", e.strategy.empty() ? std::string("unknown (torch's default on Linux is "
                                                             "file_descriptor)")
                                               : e.strategy);
  if (e.failed) {
    f.add("error", e.error);
    f.add("errors", double(e.errors));
    if (e.lost > 0) f.add(kBatchesLost, double(e.lost));
  }

  const int64_t target = e.recommended;
  const std::string t = std::to_string(target);
  const bool hard_caps = e.hard && *e.hard < target;
  f.add("recommended_nofile", double(target));
  const std::string other =
      "Or call torch.multiprocessing.set_sharing_strategy('file_system') before creating the "
      "DataLoader: tensors then travel as named files in /dev/shm and hold no descriptor, "
      "but a process that dies can leave its files in /dev/shm until reboot. Returning "
      "fewer, larger tensors per batch (stack the per-sample tensors in collate_fn) also "
      "needs fewer descriptors.";
  if (e.started_soft)
    // ulimit before the job cannot help: the process set its own limit after it started.
    f.fix = "Raise the limit where it is lowered: " + who + " runs with RLIMIT_NOFILE " +
            std::to_string(*e.soft) + ", below the " + std::to_string(*e.started_soft) +
            " the job started with, so that process (or the one that started it) set its "
            "own with resource.setrlimit or ulimit; set it to " +
            t + " there (resource.setrlimit, or ulimit -n " + t +
            " in the shell that starts it), or drop the call" +
            (hard_caps ? " (above the hard limit " + std::to_string(*e.hard) + ": needs root)"
                       : std::string()) +
            ". " + (e.fd_strategy ? other : std::string());
  else if (e.fd_strategy)
    f.fix = "Raise the open-file limit to " + t + " before the job starts: ulimit -n " + t +
            (hard_caps ? " (above the hard limit " + std::to_string(*e.hard) +
                             ": needs root, or Docker --ulimit nofile=" + t + ":" + t +
                             ", or LimitNOFILE= in a systemd unit)"
                       : std::string(" (Docker: --ulimit nofile=") + t + ":" + t +
                             "; systemd: LimitNOFILE=)") +
            ", or resource.setrlimit(resource.RLIMIT_NOFILE, ...) at the top of the script. " +
            other;
  else
    f.fix = "Raise the open-file limit: ulimit -n " + t +
            " before the job starts (the sharing strategy is already " + e.strategy +
            ", so the descriptors are the job's own files and sockets).";
  f.why =
      "torch's default sharing strategy on Linux (file_descriptor) sends each tensor "
      "storage of a batch as an open descriptor: the worker holds one per tensor until "
      "the main process has received it, and the main process one per tensor it has not "
      "freed. A batch of many small tensors (uncollated lists, detection targets) times "
      "the batches in flight can pass RLIMIT_NOFILE; then a worker fails to send its batch "
      "(\"Too many open files\", printed by the worker, the batch lost and the main "
      "process waiting for it forever) or the main process fails to receive one "
      "(\"received 0 items of ancdata\").";
  return f;
}

}  // namespace dldoctor::analyze::fd_limit
