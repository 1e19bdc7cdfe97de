// The data of a hang: what was captured from every process of the job when no batch came for
// the hang timeout (HangSnapshot), and what the hang rules (the analyzer) need to know about the
// loaders beyond it (HangContext). The watchdog fills the first; the caller's probe supplies
// the second. Nothing here decides what the hang is.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/proc_probe.hpp"
#include "dldoctor_core/watchdog/stack.hpp"

namespace dldoctor::watchdog {

/// A process using less than this share of one core over the stall is not making progress.
/// A thread blocked on a lock, queue or read uses ~0; the worker loop's 5 s status poll and
/// the stack dumps cost microseconds; a process computing uses close to 1.0. 5% sits
/// far from both and above the 10 ms tick resolution of /proc CPU times over a >= 1 s stall.
/// The watchdog's own "slow, not stuck" test and the hang rules' readings both use it.
inline constexpr double kBusyCpuShare = 0.05;

/// One process of the job at the moment of the hang.
struct ProcessCapture {
  int pid = 0;
  int loader = -1;      ///< the loader a worker belongs to; -1 for the main process
  int worker = -1;      ///< worker id within its loader; -1 = the main process
  std::string state;    ///< "R", "S", "D", "Z", "T" ..., "gone", "" unknown
  std::string wchan;    ///< kernel wait function, "" unknown / running
  std::string syscall;  ///< "futex", "read" ..., "running", "none", "" unknown
  /// CPU time used between the start of the stall (as the watchdog saw it) and the capture.
  std::optional<int64_t> cpu_ns_since_stall;
  double cpu_window_s = 0;            ///< the wall time that CPU time was measured over
  std::vector<PyThreadStack> stacks;  ///< parsed `raw_stack`, source lines annotated
  std::string raw_stack;              ///< the stack dump as written (faulthandler's format)
  std::string stack_note;             ///< why there is no stack ("no handler ...", "gone") or ""
  bool gone = false;                  ///< exited: no /proc entry, or a zombie
  std::optional<int> exit_code;       ///< when known (zombie status or the caller's knowledge)
  std::optional<int> exit_signal;     ///< when known
  std::string io_target;  ///< for state D: the file behind the blocked fd, or what wchan names
  std::vector<ThreadProbe> threads;  ///< per-thread kernel view
};

/// Everything captured at one hang.
struct HangSnapshot {
  int64_t t_ns = 0;      ///< when it was captured (CLOCK_MONOTONIC)
  double stalled_s = 0;  ///< seconds without a batch at capture time
  double timeout_s = 0;  ///< the hang timeout in force
  std::vector<ProcessCapture> processes;
};

/// What the rules need to know about one loader (iterator), beyond the capture.
struct LoaderContext {
  int loader = 0;
  std::optional<int> num_workers;
  std::string collate_fn;      ///< qualname of the collate_fn; "" = torch's default_collate
  std::string worker_init_fn;  ///< qualname of worker_init_fn; "" = none or unknown
  std::string start_method;    ///< "fork", "spawn", "forkserver"; "" unknown
  /// The main process's Python threads alive when the workers were forked (fork only).
  std::optional<int> main_threads_at_fork;
  std::vector<std::string> main_thread_names_at_fork;
  std::optional<int64_t> waiting_batch;  ///< the batch index the main process waits for
  std::optional<int> waiting_worker;     ///< the worker that was given that batch
  /// Batch indices dispatched to each worker and not yet returned, when known.
  std::map<int, std::vector<int64_t>> outstanding;
  /// Batches each worker has returned so far, when known (0 = still before its first batch).
  std::map<int, int64_t> batches_returned;
  std::optional<double> timeout_s;  ///< the DataLoader's own `timeout` (0 = waits forever)
  int main_pid = 0;                 ///< the main process that iterates it (0 unknown; one per rank)
  int rank = -1;  ///< that main process's rank in a multi-rank job (-1: none known)
};

/// What the analysis made of one capture.
struct HangJudgement {
  std::vector<report::Finding> findings;  ///< most important first
  /// Nothing is stuck yet: the job is moving in a way no batch shows (the main process joining
  /// workers that exit as it ends an iterator, say). The watchdog looks again one timeout later.
  bool progressing = false;
};

/// The loaders of the job.
struct HangContext {
  std::vector<LoaderContext> loaders;
  /// The loader with id `loader`, or nullptr.
  const LoaderContext* find(int loader) const noexcept;
};

/// CPU used over the stall as a share of one core, when both numbers are known.
std::optional<double> cpu_share(const ProcessCapture& p) noexcept;

}  // namespace dldoctor::watchdog
