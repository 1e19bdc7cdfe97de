// The hang doctor: a thread of plain C++ (no Python, no GIL) that notices when a watched
// DataLoader has produced no batch for the hang timeout, captures every process of the job
// (kernel state, CPU progress since the stall began, Python stacks through the hooks'
// stack-dump signals), has the caller's classifier name the cause, and hands the capture and
// the findings to a callback, once per stall. It asks the caller what to watch through a
// probe function and what the capture means through the classifier (analyze::classify_hang),
// so it depends neither on how the caller (the Monitor) stores its loaders nor on the hang
// rules.
#pragma once

#include <signal.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::watchdog {

/// The least hang timeout when none is set: a minute without a batch is far beyond any
/// healthy pause (an evaluation pass or a checkpoint save aside, which the adaptive part
/// covers once they show in the batch gaps), and short enough that a user still watches.
inline constexpr double kMinHangTimeoutS = 60;
/// The adaptive timeout is this many times the p99 gap between batches: a loader whose
/// slow batches take 10 s is not hung at 60 s, and 10x the p99 is rarely reached by chance.
inline constexpr double kHangTimeoutP99Factor = 10;
/// Gaps between batches kept for the p99 (the newest ones; older behaviour ages out).
inline constexpr size_t kInterBatchWindow = 1024;
/// How often the watchdog checks: a hang is reported within timeout + this + the capture.
inline constexpr int64_t kPollNs = 250'000'000;
/// The longest the capture waits for the processes' stacks.
inline constexpr int kStackWaitMs = 500;
/// The shortest window CPU progress is judged over. /proc counts CPU in 10 ms ticks, so
/// 500 ms resolves 2%, well under kBusyCpuShare; a stall first seen at the moment it is due
/// (a watchdog started late) waits this long before the capture, inside the 2 s budget.
inline constexpr int64_t kMinCpuWindowNs = 500'000'000;

/// The signal the hooks register their safe-point stack dump on (job.stackdump.STACK_SIGNAL,
/// SIGRTMAX - 6; native_stack_signal() is one below): not SIGUSR2, which torch's c10
/// fatal-signal handler and preemption notices (SLURM, torchelastic) use. Both sides compute
/// it the same way; a Python test pins them together.
inline int default_stack_signal() noexcept { return SIGRTMAX - 6; }

/// A process of the job and its role.
struct WatchedProcess {
  int pid = 0;
  int loader = -1;                 ///< loader id of a worker; -1 for a main process
  int worker = -1;                 ///< worker id; -1 for a main process
  std::optional<int> exit_code;    ///< when the caller knows how it ended
  std::optional<int> exit_signal;  ///< when the caller knows how it ended
};

/// What the caller's probe reports at each check.
struct WatchState {
  bool loader_active = false;  ///< an iterator exists and is not exhausted: batches are due
  bool waiting = false;        ///< the main process is blocked in the loader right now
  std::optional<int64_t> last_batch_ns;    ///< the newest batch (CLOCK_MONOTONIC), if any
  std::optional<int64_t> active_since_ns;  ///< when the current iterator started
  std::vector<WatchedProcess> processes;   ///< main process(es) and workers
  HangContext context;
};

/// Settings.
struct WatchdogOptions {
  std::string run_dir;                       ///< where stack-<pid>.txt files are written
  int signal = default_stack_signal();       ///< the hooks' safe-point stack-dump signal
  std::optional<double> timeout_override_s;  ///< --hang-timeout
  double min_timeout_s = kMinHangTimeoutS;
  double p99_factor = kHangTimeoutP99Factor;
  int64_t poll_ns = kPollNs;
  int stack_wait_ms = kStackWaitMs;
  int64_t min_cpu_window_ns = kMinCpuWindowNs;
};

/// max(min_s, factor x p99), or min_s when no gap is known yet.
double adaptive_timeout_s(std::optional<int64_t> p99_inter_batch_ns,
                          double min_s = kMinHangTimeoutS,
                          double factor = kHangTimeoutP99Factor) noexcept;

/// CPU time of a process at a moment: the start of a CPU-progress measurement.
struct CpuMark {
  int64_t t_ns = 0;
  std::optional<int64_t> cpu_ns;
};

/// Captures every process now: kernel state, CPU since `marks` (by pid), Python stacks
/// (signal + stack files; blocks up to `stack_wait_ms`), source lines.
HangSnapshot capture_hang(const std::vector<WatchedProcess>& processes,
                          const std::map<int, CpuMark>& marks, int64_t now_ns, double stalled_s,
                          double timeout_s, const std::string& run_dir, int signal,
                          int stack_wait_ms);

/// The watchdog thread. Thread-safe; note_* are wait-free and cheap enough for every batch.
class Watchdog {
 public:
  using Probe = std::function<WatchState()>;
  /// Names the cause of a captured hang (analyze::judge_hang); no finding, with a worker
  /// using CPU or the judgement saying the job progresses, means slow, not stuck: the
  /// watchdog looks again one timeout later.
  using Classify = std::function<HangJudgement(const HangSnapshot&, const HangContext&)>;
  using OnHang = std::function<void(const HangSnapshot&, const std::vector<report::Finding>&)>;

  /// `probe` is called on the watchdog thread every poll, `classify` on each capture;
  /// `on_hang` once per stall, on the watchdog thread, after the findings are stored.
  /// `probe` and `classify` are required (dldoctor::Error).
  Watchdog(WatchdogOptions options, Probe probe, Classify classify, OnHang on_hang = {});
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  /// Starts the thread (dldoctor::Error when it is already running or cannot start).
  void start();
  /// Stops and joins the thread; safe to call twice. Not from inside on_hang or the probe.
  void stop() noexcept;
  /// True while the thread runs.
  bool running() const noexcept { return thread_.joinable(); }

  /// A batch was handed to the consumer at `t_ns` (CLOCK_MONOTONIC).
  void note_batch(int64_t t_ns) noexcept;
  /// One gap between consecutive batches of a loader, for the adaptive timeout.
  void note_inter_batch_ns(int64_t ns) noexcept;
  /// Fixes the timeout (--hang-timeout); nullopt returns to the adaptive one.
  void set_timeout_override(std::optional<double> seconds);
  /// The timeout in force now.
  double timeout_s() const;
  /// p99 of the gaps noted so far (nearest rank over the newest kInterBatchWindow).
  std::optional<int64_t> p99_inter_batch_ns() const;

  /// One check on the caller's thread, as the thread does each poll: true when it captured
  /// a hang (and called on_hang). For tests and for a caller without the thread.
  bool check(int64_t now_ns);

  /// Hangs captured so far.
  int hangs() const noexcept { return hangs_.load(std::memory_order_relaxed); }
  /// The newest capture, if any.
  std::optional<HangSnapshot> last_snapshot() const;
  /// The newest capture's findings (empty before the first).
  std::vector<report::Finding> last_findings() const;

 private:
  void run();

  WatchdogOptions options_;
  Probe probe_;
  Classify classify_;
  OnHang on_hang_;

  std::atomic<int64_t> last_batch_ns_{0};
  std::array<std::atomic<int64_t>, kInterBatchWindow> gaps_{};
  std::atomic<uint64_t> gap_count_{0};

  mutable std::mutex options_mu_;  // timeout override
  std::mutex check_mu_;            // one check at a time; guards the stall state below
  int64_t active_seen_ns_ = 0;     // first check that saw the loader active (0: inactive)
  int64_t stall_key_ = -1;         // the stall start the CPU marks belong to
  int64_t fired_key_ = -1;         // the stall start already reported
  int64_t defer_until_ns_ = 0;     ///< no capture before this (a stall that was slow, not stuck)
  std::map<int, CpuMark> marks_;
  int64_t marks_since_ns_ = 0;  // when the first mark of this stall was taken

  mutable std::mutex result_mu_;
  std::optional<HangSnapshot> last_snapshot_;
  std::vector<report::Finding> last_findings_;
  std::atomic<int> hangs_{0};

  std::mutex run_mu_;
  std::condition_variable run_cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace dldoctor::watchdog
