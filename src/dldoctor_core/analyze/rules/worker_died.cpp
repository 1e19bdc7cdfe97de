// A dead worker ends the epoch with an error (critical), ranked below a finding that names
// the cause itself (shm_exhausted for a bus error); at a hang, the dead worker never returns
// the batches it was given, and the main process takes batches in order.
#include "dldoctor_core/analyze/rules/worker_died.hpp"

#include <algorithm>
#include <csignal>
#include <set>

#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::worker_died {

Reason reason_of(const WorkerDeath& d) noexcept {
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

namespace {

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
std::string fewer_workers(const std::optional<int>& num_workers) {
  if (num_workers && *num_workers > 1)
    return "fewer workers (num_workers=" + std::to_string(*num_workers / 2) + ", now " +
           std::to_string(*num_workers) + "), ";
  return "fewer workers, ";
}

}  // namespace

std::vector<Evidence> detect(const JobView& job) {
  const std::vector<WorkerDeath>& deaths = job.failures.deaths;
  std::vector<Evidence> out;
  for (const WorkerDeath& d : deaths) {
    const Reason r = reason_of(d);
    if (std::any_of(out.begin(), out.end(), [&](const Evidence& e) { return e.reason == r; }))
      continue;
    Evidence e;
    e.reason = r;
    e.first = d;
    e.deaths = std::count_if(deaths.begin(), deaths.end(),
                             [&](const WorkerDeath& o) { return reason_of(o) == r; });
    // A bus error's cause is named by shm_exhausted: the death is then a warning.
    e.rank = {r == Reason::kBusError ? report::Severity::kWarning : report::Severity::kCritical,
              report::Tier::kDeath, double(e.deaths)};
    for (const LoaderView& l : job.loaders)
      if (l.loader == d.loader) e.num_workers = l.config.num_workers;
    out.push_back(std::move(e));
  }
  return out;
}

report::Finding finding(const Evidence& e) {
  const WorkerDeath& d = e.first;
  report::Finding f = report::make_finding("worker_died", d.loader, e.rank);
  const std::string who = "DataLoader worker " + std::to_string(d.worker) +
                          (d.pid ? " (pid " + std::to_string(d.pid) + ")" : std::string());
  std::string how;
  if (d.signal)
    how = "killed by " + signal_name(*d.signal);
  else if (d.exit_code)
    how = "exited with code " + std::to_string(*d.exit_code);
  else
    how = "died";

  std::string reason, fix, why;
  const auto limit = d.cgroup_limit_bytes;
  const auto used = d.cgroup_peak_bytes ? d.cgroup_peak_bytes : d.cgroup_usage_bytes;
  switch (e.reason) {
    case Reason::kOomKiller:
    case Reason::kLikelyOom:
      reason = e.reason == Reason::kOomKiller ? "the OOM killer"
                                              : "the OOM killer (memory at its limit)";
      fix =
          "Give each worker less to hold, or the job more memory: " + fewer_workers(e.num_workers) +
          "a smaller prefetch_factor or batch; keep the dataset's index in numpy arrays "
          "or tensors rather than Python lists and dicts (each worker's reads copy those "
          "pages, see cow_memory_growth); load large files lazily in __getitem__ rather "
          "than in __init__. Or raise the limit: docker run --memory, Kubernetes "
          "resources.limits.memory" +
          (limit ? std::string(" (now ") + bytes_text(double(*limit)) + ")" : std::string()) + ".";
      why =
          "The kernel's OOM killer picks the process with the most memory when the "
          "machine or the job's memory cgroup runs out, and a worker that grows (copies "
          "of the dataset, a cache, big batches) is that process. It is killed with "
          "SIGKILL, so it leaves no traceback; torch only sees the worker gone.";
      break;
    case Reason::kSigkill:
      reason = "SIGKILL from outside the job (no OOM kill was counted)";
      fix =
          "Find who sent it: a scheduler's time or memory limit (SLURM, Kubernetes "
          "eviction), a watchdog, or an OOM kill outside this cgroup (dmesg | grep -i "
          "'killed process').";
      why =
          "SIGKILL cannot be caught, so the worker leaves no traceback. The job's memory "
          "cgroup did not count an OOM kill, so something else sent it.";
      break;
    case Reason::kSegfault:
      reason = "a segmentation fault in native code";
      fix =
          "Run the loader with num_workers=0 to get the crash in the main process, with "
          "python -X faulthandler for the Python stack; common causes are a C extension "
          "used after fork (OpenCV, a database or HDF5 handle opened in __init__: open it "
          "in worker_init_fn or lazily in __getitem__), or multiprocessing_context="
          "'spawn' when the parent had threads.";
      why =
          "A worker that crashes in C code dies without a Python traceback; torch only "
          "sees the signal.";
      break;
    case Reason::kBusError:
      reason = "a bus error (shared memory that could not be backed: see shm_exhausted)";
      fix = "Make /dev/shm large enough for the batches in flight (see shm_exhausted).";
      why =
          "SIGBUS in a DataLoader worker comes from touching a shared-memory page the "
          "tmpfs behind /dev/shm has no room for.";
      break;
    case Reason::kOtherSignal:
      reason = how;
      fix =
          "Run with num_workers=0 to reproduce in the main process, where the error is "
          "raised with its traceback.";
      why = "A worker killed by a signal leaves no traceback; torch only sees the signal.";
      break;
    case Reason::kExit:
      reason = "exit code " + std::to_string(*d.exit_code) +
               " (os._exit or sys.exit in dataset code, or a library that exits)";
      fix =
          "Look at what it printed last (stderr_tail) and at calls to sys.exit / os._exit "
          "/ exit() in the dataset, its libraries and worker_init_fn; raise an exception "
          "instead, which torch re-raises in the main process with its traceback.";
      why =
          "A worker that exits on its own leaves no exception for torch to forward, so the "
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
  if (e.deaths > 1) f.add("deaths", double(e.deaths));
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
  return f;
}

std::vector<AtHang> detect_at_hang(const watchdog::HangSnapshot& snapshot,
                                   const watchdog::HangContext& context) {
  // Loaders whose main process is ending the iterator: their workers exit on purpose.
  std::set<int> ending;
  for (const watchdog::ProcessCapture& p : snapshot.processes) {
    if (p.worker >= 0) continue;
    const int loader = effective_loader(p, context);
    if (read_process(p, context.find(loader)).place == Place::kShuttingDown) ending.insert(loader);
  }
  std::vector<Suspect> dead;
  for (const watchdog::ProcessCapture& p : snapshot.processes) {
    if (p.worker < 0) continue;
    if (!(p.gone || p.state == "Z" || p.state == "X" || p.state == "gone")) continue;
    const bool clean = p.exit_code.value_or(-1) == 0 && !p.exit_signal;
    if (clean && (ending.count(p.loader) || ending.count(-1))) continue;  // a shutdown
    dead.push_back({&p, read_process(p, context.find(p.loader)), p.loader});
  }
  std::vector<AtHang> out;
  for (SuspectGroup& g : group_by_loader(std::move(dead), context))
    out.push_back({g.rank(snapshot.stalled_s), std::move(g), snapshot.stalled_s});
  return out;
}

namespace {

void set_fix_why(report::Finding& f, const watchdog::ProcessCapture& p) {
  if (p.exit_signal && *p.exit_signal == SIGKILL) {
    f.fix =
        "Most often the kernel's OOM killer: check `dmesg | grep -i -e oom -e killed` or the "
        "memory cgroup's oom_kill count; lower num_workers, prefetch_factor or the batch size, "
        "or raise the memory limit.";
  } else if (p.exit_signal && *p.exit_signal == SIGBUS) {
    f.fix =
        "Shared memory (/dev/shm) is too small for the batches in flight: enlarge it (docker "
        "--shm-size=8g, or `mount -o remount,size=8G /dev/shm`) or lower prefetch_factor / "
        "num_workers.";
  } else if (p.exit_signal &&
             (*p.exit_signal == SIGSEGV || *p.exit_signal == SIGABRT || *p.exit_signal == SIGILL)) {
    f.fix =
        "A native crash in the worker (a C extension, or a library that is not fork-safe): run "
        "the loader with num_workers=0 to get the traceback in the main process, and try "
        "multiprocessing_context='spawn'.";
  } else if (p.exit_code && *p.exit_code != 0) {
    f.fix =
        "The worker exited with an error status: run the loader with num_workers=0 to see the "
        "exception in the main process.";
  } else {
    f.fix =
        "Run the loader with num_workers=0 to see the error in the main process, and check "
        "`dmesg` for the OOM killer.";
  }
  f.why =
      "A dead worker never returns the batches it was given, and the main process takes "
      "batches in order, so it waits for them.";
}

}  // namespace

report::Finding finding(const AtHang& e) {
  const Suspect& s = e.dead.primary();
  const watchdog::ProcessCapture& p = *s.process;
  report::Finding f = report::make_finding("worker_died", s.loader, e.rank);
  std::string how = p.exit_signal ? " (killed by " + signal_name(*p.exit_signal) + ")"
                    : p.exit_code ? " (exit status " + std::to_string(*p.exit_code) + ")"
                                  : "";
  f.title = subject(p) + " (pid " + std::to_string(p.pid) + ") died" + how +
            " and the loader has waited " + seconds(e.stalled_s) + " since";
  f.add("worker", double(p.worker));
  f.add("pid", double(p.pid));
  f.add("stalled_s", e.stalled_s);
  f.add("state", p.state.empty() ? std::string("gone") : p.state);
  if (p.exit_code) f.add("exit_code", double(*p.exit_code));
  if (p.exit_signal) {
    f.add("exit_signal", double(*p.exit_signal));
    f.add("exit_signal_name", signal_name(*p.exit_signal));
  }
  if (std::string held = held_batches(e.dead.loader, p.worker); !held.empty())
    f.add("held_batches", held);
  if (e.dead.suspects.size() > 1) f.add("dead_workers", list_suspects(e.dead.suspects));
  set_fix_why(f, p);
  return f;
}

}  // namespace dldoctor::analyze::worker_died
