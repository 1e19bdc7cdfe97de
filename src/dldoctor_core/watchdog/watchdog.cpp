// The watchdog measures the stall from the later of the newest batch and the start of the
// current iterator, so a loader that never delivers its first batch (a worker stuck in
// worker_init_fn) is caught too. CPU progress is measured from the first check after the
// stall began, per process.
#include "dldoctor_core/watchdog/watchdog.hpp"

#include <cxxabi.h>
#include <pthread.h>

#include <algorithm>
#include <cmath>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/watchdog/proc_probe.hpp"
#include "dldoctor_core/watchdog/stack.hpp"
#include "dldoctor_core/watchdog/syscall_name.hpp"

namespace dldoctor::watchdog {
namespace {

/// For a process in D state: the file behind the descriptor it reads, and/or what the kernel
/// wait function says about the device.
std::string io_target_of(const ProcessProbe& p) {
  std::string file;
  if (syscall_takes_fd(p.syscall) && !p.syscall_args.empty()) {
    file = fd_target(p.pid, int(p.syscall_args[0]));
  }
  std::string device = describe_wchan(p.wchan);
  if (file.empty()) return device;
  if (device.empty()) return file;
  return file + " (" + device + ")";
}

}  // namespace

double adaptive_timeout_s(std::optional<int64_t> p99_ns, double min_s, double factor) noexcept {
  if (!p99_ns) return min_s;
  return std::max(min_s, factor * double(*p99_ns) / 1e9);
}

HangSnapshot capture_hang(const std::vector<WatchedProcess>& processes,
                          const std::map<int, CpuMark>& marks, int64_t now, double stalled_s,
                          double timeout_s, const std::string& run_dir, int signal,
                          int stack_wait_ms) {
  HangSnapshot snap;
  snap.t_ns = now;
  snap.stalled_s = stalled_s;
  snap.timeout_s = timeout_s;
  std::vector<int> live;
  std::vector<size_t> live_index;
  // The kernel view first: the signal that fetches the stacks wakes each process briefly.
  for (const WatchedProcess& w : processes) {
    ProcessProbe probe = probe_process(w.pid, true);
    int64_t probed = now_ns();
    ProcessCapture c;
    c.pid = w.pid;
    c.loader = w.loader;
    c.worker = w.worker;
    c.state = probe.state;
    c.wchan = probe.wchan;
    c.syscall = probe.syscall;
    c.gone = probe.gone || probe.state == "Z" || probe.state == "X";
    c.exit_code = probe.exit_code ? probe.exit_code : w.exit_code;
    c.exit_signal = probe.exit_signal ? probe.exit_signal : w.exit_signal;
    c.threads = std::move(probe.threads);
    auto mark = marks.find(w.pid);
    if (mark != marks.end() && mark->second.cpu_ns && probe.cpu_ns) {
      c.cpu_ns_since_stall = std::max<int64_t>(0, *probe.cpu_ns - *mark->second.cpu_ns);
      c.cpu_window_s = double(probed - mark->second.t_ns) / 1e9;
    }
    if (c.state == "D") c.io_target = io_target_of(probe);
    if (!c.gone) {
      live.push_back(w.pid);
      live_index.push_back(snap.processes.size());
    } else {
      c.stack_note = "gone";
    }
    snap.processes.push_back(std::move(c));
  }
  if (!run_dir.empty() && !live.empty()) {
    std::vector<StackCapture> stacks = capture_stacks(live, run_dir, signal, stack_wait_ms);
    for (size_t i = 0; i < stacks.size(); ++i) {
      ProcessCapture& c = snap.processes[live_index[i]];
      c.raw_stack = std::move(stacks[i].text);
      c.stack_note = std::move(stacks[i].note);
      if (stacks[i].gone) {
        c.gone = true;
        ProcessProbe late = probe_process(c.pid, false);
        c.state = late.state.empty() ? "gone" : late.state;
        if (late.exit_code) c.exit_code = late.exit_code;
        if (late.exit_signal) c.exit_signal = late.exit_signal;
      }
      c.stacks = parse_faulthandler(c.raw_stack);
      annotate_source(c.stacks);
    }
  }
  return snap;
}

Watchdog::Watchdog(WatchdogOptions options, Probe probe, Classify classify, OnHang on_hang)
    : options_(std::move(options)),
      probe_(std::move(probe)),
      classify_(std::move(classify)),
      on_hang_(std::move(on_hang)) {
  if (!probe_) throw Error("watchdog: a probe function is required");
  if (!classify_) throw Error("watchdog: a classifier is required");
}

Watchdog::~Watchdog() { stop(); }

void Watchdog::start() {
  if (thread_.joinable()) throw Error("watchdog: already running");
  {
    std::lock_guard lock(run_mu_);
    stopping_ = false;
  }
  try {
    thread_ = std::thread([this] { run(); });
  } catch (const std::system_error& e) {
    throw Error(std::string("watchdog: cannot start its thread: ") + e.what());
  }
}

void Watchdog::stop() noexcept {
  {
    std::lock_guard lock(run_mu_);
    stopping_ = true;
  }
  run_cv_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

void Watchdog::run() {
  // The capture signals the job's processes' main threads, possibly this process's: should
  // a signal ever be sent to the process as a whole, let another thread take it, so the
  // watchdog's own sleeps and reads are never interrupted by its own signal.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, options_.signal);
  sigaddset(&set, native_stack_signal(options_.signal));
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::unique_lock lock(run_mu_);
  while (!stopping_) {
    run_cv_.wait_for(lock, std::chrono::nanoseconds(options_.poll_ns), [&] { return stopping_; });
    if (stopping_) break;
    lock.unlock();
    try {
      check(now_ns());
    } catch (abi::__forced_unwind&) {
      throw;  // the thread is being cancelled (pthread_exit): let it unwind
    } catch (...) {
      // A failed check (the probe threw, memory ran out) is skipped; the next poll retries.
    }
    lock.lock();
  }
}

void Watchdog::note_batch(int64_t t_ns) noexcept {
  int64_t seen = last_batch_ns_.load(std::memory_order_relaxed);
  while (t_ns > seen &&
         !last_batch_ns_.compare_exchange_weak(seen, t_ns, std::memory_order_relaxed)) {
  }
}

void Watchdog::note_inter_batch_ns(int64_t ns) noexcept {
  if (ns < 0) return;
  uint64_t i = gap_count_.fetch_add(1, std::memory_order_relaxed);
  gaps_[i % kInterBatchWindow].store(ns, std::memory_order_relaxed);
}

void Watchdog::set_timeout_override(std::optional<double> seconds) {
  if (seconds && !(*seconds > 0))
    throw Error("--hang-timeout must be a positive number of seconds");
  std::lock_guard lock(options_mu_);
  options_.timeout_override_s = seconds;
}

std::optional<int64_t> Watchdog::p99_inter_batch_ns() const {
  size_t n =
      size_t(std::min<uint64_t>(gap_count_.load(std::memory_order_relaxed), kInterBatchWindow));
  if (n == 0) return std::nullopt;
  std::vector<int64_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = gaps_[i].load(std::memory_order_relaxed);
  // Nearest rank: the smallest gap with at least 99% of the gaps at or below it.
  size_t rank = size_t(std::ceil(0.99 * double(n)));
  std::nth_element(v.begin(), v.begin() + std::ptrdiff_t(rank - 1), v.end());
  return v[rank - 1];
}

double Watchdog::timeout_s() const {
  std::lock_guard lock(options_mu_);
  if (options_.timeout_override_s) return *options_.timeout_override_s;
  return adaptive_timeout_s(p99_inter_batch_ns(), options_.min_timeout_s, options_.p99_factor);
}

bool Watchdog::check(int64_t now) {
  WatchState st = probe_();
  std::lock_guard lock(check_mu_);
  if (!st.loader_active) {
    active_seen_ns_ = 0;
    stall_key_ = -1;
    marks_.clear();
    return false;
  }
  if (active_seen_ns_ == 0) active_seen_ns_ = now;
  int64_t start = last_batch_ns_.load(std::memory_order_relaxed);
  if (st.last_batch_ns) start = std::max(start, *st.last_batch_ns);
  if (st.active_since_ns) start = std::max(start, *st.active_since_ns);
  if (start <= 0) start = active_seen_ns_;
  if (start != stall_key_) {
    stall_key_ = start;
    marks_.clear();
    marks_since_ns_ = now_ns();
  }
  for (const WatchedProcess& p : st.processes) {
    if (!marks_.count(p.pid)) marks_[p.pid] = CpuMark{now_ns(), process_cpu_ns(p.pid)};
  }
  double timeout = timeout_s();
  double stalled = double(now - start) / 1e9;
  if (stalled < timeout || fired_key_ == start || now < defer_until_ns_) return false;
  fired_key_ = start;

  std::string run_dir;
  int signal;
  int wait_ms;
  int64_t min_window;
  {
    std::lock_guard olock(options_mu_);
    run_dir = options_.run_dir;
    signal = options_.signal;
    wait_ms = options_.stack_wait_ms;
    min_window = options_.min_cpu_window_ns;
  }
  if (int64_t short_by = marks_since_ns_ + min_window - now_ns(); short_by > 0) {
    std::this_thread::sleep_for(std::chrono::nanoseconds(short_by));
  }
  HangSnapshot snap =
      capture_hang(st.processes, marks_, now, stalled, timeout, run_dir, signal, wait_ms);
  HangJudgement judged = classify_(snap, st.context);
  std::vector<report::Finding>& findings = judged.findings;
  const bool workers_busy =
      std::any_of(snap.processes.begin(), snap.processes.end(), [](const ProcessCapture& p) {
        auto share = cpu_share(p);
        return p.worker >= 0 && share && *share >= kBusyCpuShare;
      });
  if (findings.empty() && (workers_busy || judged.progressing)) {
    // Slow is not stuck: the workers the loader waits for are still using CPU (starting up
    // under spawn, a very slow batch). Look again one timeout later, over fresh CPU marks.
    fired_key_ = -1;
    defer_until_ns_ = now + int64_t(timeout * 1e9);
    marks_.clear();
    marks_since_ns_ = now_ns();
    return false;
  }
  {
    std::lock_guard rlock(result_mu_);
    last_snapshot_ = snap;
    last_findings_ = findings;
  }
  hangs_.fetch_add(1, std::memory_order_relaxed);
  if (on_hang_) {
    try {
      on_hang_(snap, findings);
    } catch (abi::__forced_unwind&) {
      throw;
    } catch (...) {
      // The caller's callback failing must not end the watchdog.
    }
  }
  return true;
}

std::optional<HangSnapshot> Watchdog::last_snapshot() const {
  std::lock_guard lock(result_mu_);
  return last_snapshot_;
}

std::vector<report::Finding> Watchdog::last_findings() const {
  std::lock_guard lock(result_mu_);
  return last_findings_;
}

}  // namespace dldoctor::watchdog
