// worker_died: a DataLoader worker killed by a signal or exiting non-zero, with the reason:
// the OOM killer (the memory cgroup's oom_kill counter rose, or memory sat at its limit),
// SIGSEGV in native code, a SIGKILL from outside, a plain exit code, and what the worker
// last wrote to stderr. torch then raises "DataLoader worker ... exited unexpectedly" or
// "... killed by signal" in the main process, and the run ends.
#include <algorithm>
#include <csignal>
#include <cstring>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {

/// A memory cgroup at this share of its limit at a SIGKILL is taken as the OOM killer even
/// when its counter could not be read: nothing else kills at that moment so often, and the
/// kernel reclaims down to the limit before it kills.
inline constexpr double kOomNearLimitFraction = 0.95;

namespace {

enum class Reason { kOomKiller, kLikelyOom, kSigkill, kSegfault, kBusError, kOtherSignal, kExit,
                    kUnknown };

Reason reason_of(const WorkerDeath& d) {
  if (d.signal) {
    if (*d.signal == SIGKILL) {
      if ((d.cgroup_oom_kills && *d.cgroup_oom_kills > 0) ||
          (d.machine_oom_kills && *d.machine_oom_kills > 0))
        return Reason::kOomKiller;
      const auto used = d.cgroup_peak_bytes ? d.cgroup_peak_bytes : d.cgroup_usage_bytes;
      if (used && d.cgroup_limit_bytes && *d.cgroup_limit_bytes > 0 &&
          double(*used) >= kOomNearLimitFraction * double(*d.cgroup_limit_bytes))
        return Reason::kLikelyOom;
      return Reason::kSigkill;
    }
    if (*d.signal == SIGSEGV) return Reason::kSegfault;
    if (*d.signal == SIGBUS) return Reason::kBusError;
    return Reason::kOtherSignal;
  }
  if (d.exit_code) return Reason::kExit;
  return Reason::kUnknown;
}

std::string signal_name(int sig) {
  switch (sig) {
    case SIGKILL: return "SIGKILL";
    case SIGSEGV: return "SIGSEGV";
    case SIGBUS: return "SIGBUS";
    case SIGABRT: return "SIGABRT";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT";
    case SIGFPE: return "SIGFPE";
    case SIGILL: return "SIGILL";
    default: return "signal " + std::to_string(sig);
  }
}

/// The last `lines` non-empty lines of a text.
std::string last_lines(const std::string& text, int lines) {
  size_t end = text.find_last_not_of(" \n\r\t");
  if (end == std::string::npos) return "";
  size_t pos = end + 1;
  int n = 0;
  while (pos > 0 && n < lines) {
    size_t nl = text.rfind('\n', pos - 1);
    if (nl == std::string::npos) {
      pos = 0;
      break;
    }
    pos = nl;
    if (nl + 1 <= end) ++n;
  }
  std::string out = text.substr(pos == 0 ? 0 : pos + 1, end + 1 - (pos == 0 ? 0 : pos + 1));
  return out.size() > 1500 ? out.substr(out.size() - 1500) : out;
}

/// "fewer workers (num_workers=2, now 4), " when the loader has more than one.
std::string fewer_workers(const JobView& job, const WorkerDeath& d) {
  for (const LoaderView& l : job.loaders)
    if (l.loader == d.loader && l.config.num_workers > 1)
      return "fewer workers (num_workers=" + std::to_string(l.config.num_workers / 2) +
             ", now " + std::to_string(l.config.num_workers) + "), ";
  return "fewer workers, ";
}

}  // namespace

void rule_worker_died(const JobView& job, std::vector<report::Finding>& out) {
  const std::vector<WorkerDeath>& deaths = job.failures.deaths;
  if (deaths.empty()) return;
  // One finding per reason (a crash loop kills the same way many times); the first death of
  // each reason carries the figures.
  std::vector<Reason> seen;
  for (const WorkerDeath& d : deaths) {
    const Reason r = reason_of(d);
    if (std::find(seen.begin(), seen.end(), r) != seen.end()) continue;
    seen.push_back(r);
    const int64_t same = std::count_if(deaths.begin(), deaths.end(),
                                       [&](const WorkerDeath& o) { return reason_of(o) == r; });

    report::Finding f;
    f.id = "worker_died";
    f.loader = d.loader;
    // A dead worker ends the epoch with an error: critical, ranked below a finding that
    // names the cause itself (shm_exhausted for a bus error); the more deaths, the higher.
    f.severity = r == Reason::kBusError ? report::Severity::kWarning : report::Severity::kCritical;
    f.tier = report::Tier::kDeath;
    f.score = double(same);
    const std::string who = "DataLoader worker " + std::to_string(d.worker) +
                            (d.pid ? " (pid " + std::to_string(d.pid) + ")" : std::string());
    std::string how;
    if (d.signal) how = "killed by " + signal_name(*d.signal);
    else if (d.exit_code) how = "exited with code " + std::to_string(*d.exit_code);
    else how = "died";

    std::string reason, fix, why;
    const auto limit = d.cgroup_limit_bytes;
    const auto used = d.cgroup_peak_bytes ? d.cgroup_peak_bytes : d.cgroup_usage_bytes;
    switch (r) {
      case Reason::kOomKiller:
      case Reason::kLikelyOom:
        reason = r == Reason::kOomKiller ? "the OOM killer" : "the OOM killer (memory at its limit)";
        fix = "Give each worker less to hold, or the job more memory: " + fewer_workers(job, d) +
              "a smaller prefetch_factor or batch; keep the dataset's index in numpy arrays "
              "or tensors rather than Python lists and dicts (each worker's reads copy those "
              "pages, see cow_memory_growth); load large files lazily in __getitem__ rather "
              "than in __init__. Or raise the limit: docker run --memory, Kubernetes "
              "resources.limits.memory" +
              (limit ? std::string(" (now ") + bytes_text(double(*limit)) + ")" : std::string()) +
              ".";
        why = "The kernel's OOM killer picks the process with the most memory when the "
              "machine or the job's memory cgroup runs out, and a worker that grows (copies "
              "of the dataset, a cache, big batches) is that process. It is killed with "
              "SIGKILL, so it leaves no traceback; torch only sees the worker gone.";
        break;
      case Reason::kSigkill:
        reason = "SIGKILL from outside the job (no OOM kill was counted)";
        fix = "Find who sent it: a scheduler's time or memory limit (SLURM, Kubernetes "
              "eviction), a watchdog, or an OOM kill outside this cgroup (dmesg | grep -i "
              "'killed process').";
        why = "SIGKILL cannot be caught, so the worker leaves no traceback. The job's memory "
              "cgroup did not count an OOM kill, so something else sent it.";
        break;
      case Reason::kSegfault:
        reason = "a segmentation fault in native code";
        fix = "Run the loader with num_workers=0 to get the crash in the main process, with "
              "python -X faulthandler for the Python stack; common causes are a C extension "
              "used after fork (OpenCV, a database or HDF5 handle opened in __init__: open it "
              "in worker_init_fn or lazily in __getitem__), or multiprocessing_context="
              "'spawn' when the parent had threads.";
        why = "A worker that crashes in C code dies without a Python traceback; torch only "
              "sees the signal.";
        break;
      case Reason::kBusError:
        reason = "a bus error (shared memory that could not be backed: see shm_exhausted)";
        fix = "Make /dev/shm large enough for the batches in flight (see shm_exhausted).";
        why = "SIGBUS in a DataLoader worker comes from touching a shared-memory page the "
              "tmpfs behind /dev/shm has no room for.";
        break;
      case Reason::kOtherSignal:
        reason = how;
        fix = "Run with num_workers=0 to reproduce in the main process, where the error is "
              "raised with its traceback.";
        why = "A worker killed by a signal leaves no traceback; torch only sees the signal.";
        break;
      case Reason::kExit:
        reason = "exit code " + std::to_string(*d.exit_code) +
                 " (os._exit or sys.exit in dataset code, or a library that exits)";
        fix = "Look at what it printed last (stderr_tail) and at calls to sys.exit / os._exit "
              "/ exit() in the dataset, its libraries and worker_init_fn; raise an exception "
              "instead, which torch re-raises in the main process with its traceback.";
        why = "A worker that exits on its own leaves no exception for torch to forward, so the "
              "main process only learns that it exited unexpectedly.";
        break;
      case Reason::kUnknown:
        reason = "unknown (no exit status could be read)";
        fix = "Run with num_workers=0 to reproduce in the main process.";
        why = "torch saw the worker gone without an exit status.";
        break;
    }
    f.title = who + " " + how + ": " + reason;
    f.add("worker", double(d.worker));
    if (d.pid) f.add("pid", double(d.pid));
    if (d.exit_code) f.add("exit_code", double(*d.exit_code));
    if (d.signal) {
      f.add("signal", double(*d.signal));
      f.add("signal_name", signal_name(*d.signal));
    }
    f.add("reason", reason);
    if (same > 1) f.add("deaths", double(same));
    if (d.cgroup_oom_kills) f.add("cgroup_oom_kills", double(*d.cgroup_oom_kills));
    if (d.machine_oom_kills) f.add("machine_oom_kills", double(*d.machine_oom_kills));
    if (limit) f.add("cgroup_memory_limit_bytes", double(*limit));
    if (d.cgroup_usage_bytes) f.add("cgroup_memory_usage_bytes", double(*d.cgroup_usage_bytes));
    if (d.cgroup_peak_bytes) f.add("cgroup_memory_peak_bytes", double(*d.cgroup_peak_bytes));
    if (d.rss_peak_bytes) f.add("worker_rss_peak_bytes", double(*d.rss_peak_bytes));
    if (used && limit && *limit > 0) f.add("cgroup_memory_used_fraction", double(*used) / *limit);
    if (!d.message.empty()) f.add("message", d.message.substr(0, 600));
    if (!d.stderr_tail.empty()) f.add("stderr_tail", last_lines(d.stderr_tail, 12));
    f.fix = std::move(fix);
    f.why = std::move(why);
    out.push_back(std::move(f));
  }
}

}  // namespace dldoctor::analyze
