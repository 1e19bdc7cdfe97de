// What the analyzer remembers from the /proc sampler: the newest passes (for the recent
// window) and running sums per pid and for the machine (for the whole run). Pids are not
// classified here: a pass may arrive before the events that say which pid is a worker, so
// the Session picks the pids it wants when it analyses.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dldoctor_core/sample/snapshot.hpp"

namespace dldoctor::analyze {

/// Sampler figures over a set of processes and a stretch of time.
struct ProcAgg {
  int processes = 0;                              ///< of the set, seen in the stretch
  int samples = 0;                                ///< (pass, pid) pairs seen
  std::optional<double> cpu_pct;                  ///< mean per process, % of one core
  std::optional<double> runq_delay_pct;           ///< mean per process, % of wall
  /// Mean per process: its wait for a CPU each time one was given to it, µs
  /// (sample::ProcessSample::runq_wait_per_slice_us).
  std::optional<double> runq_wait_per_slice_us;
  std::optional<double> involuntary_cs_per_s;     ///< mean per process
  std::optional<double> voluntary_cs_per_s;       ///< mean per process
  std::optional<double> read_bytes_per_s;         ///< all the set together: from storage
  std::optional<double> rchar_per_s;              ///< all the set together: all reads
  std::vector<std::pair<int, double>> cpu_pct_each;  ///< per pid, mean % of one core
  std::optional<int64_t> open_fds_max;  ///< most descriptors one process of the set held
  int open_fds_max_pid = 0;             ///< the process that held them
  /// Each process's most descriptors and most resident memory, summed over the set: what a
  /// rank's processes hold of the node's budgets (the peaks need not be at one instant).
  std::optional<int64_t> open_fds_peak_sum;
  std::optional<int64_t> rss_peak_sum;
  std::optional<double> threads;                  ///< mean per process: threads it has
  std::optional<double> active_threads;           ///< mean per process: threads running or
                                                  ///< queued for a CPU (sample::ProcessSample)
  std::optional<double> active_threads_max;       ///< the largest per-process mean
};

/// Machine figures over a stretch of time (means of the passes that knew them).
struct MachineAgg {
  int passes = 0;
  std::optional<double> cpu_busy_pct;
  std::optional<double> cpu_steal_pct;  ///< the hypervisor's share of the CPUs (in busy)
  std::optional<double> io_pressure_some;
  std::optional<double> cpu_pressure_some;
  std::optional<double> mem_pressure_some;
  std::optional<int64_t> mem_available_min_bytes;
  std::optional<int64_t> shm_total_bytes;     ///< /dev/shm size (the newest pass)
  std::optional<int64_t> shm_used_max_bytes;  ///< /dev/shm in use, most and least seen
  std::optional<int64_t> shm_used_min_bytes;
  std::optional<double> swap_in_per_s;        ///< pages/s, mean
  std::optional<double> swap_out_per_s;
  std::optional<int64_t> mem_available_last_bytes;  ///< the newest pass that knew it
};

/// Sampler state.
class ProcessTrack {
 public:
  static constexpr int64_t kKeepNs = 20'000'000'000;  ///< passes kept: the 10 s window, twice
  static constexpr size_t kKeepPasses = 512;          ///< and at most this many
  static constexpr size_t kMaxPids = 16384;  ///< per-pid sums kept; new pids beyond are ignored

  void ingest(const sample::Snapshot& s);

  /// Figures of `pids` over passes in [from_ns, to_ns]; from_ns < 0: the whole run.
  ProcAgg aggregate(const std::vector<int>& pids, int64_t from_ns, int64_t to_ns) const;
  MachineAgg machine(int64_t from_ns, int64_t to_ns) const;
  /// When the sampler first and last saw `pid` (empty: never).
  std::optional<std::pair<int64_t, int64_t>> seen(int pid) const;
  /// The most resident memory the sampler saw `pid` use (empty: never read).
  std::optional<int64_t> rss_max(int pid) const;
  /// Whether the newest pass saw `pid` (empty: no pass yet).
  std::optional<bool> alive_in_latest(int pid) const;
  bool any() const noexcept { return passes_ > 0; }
  int64_t latest_ns() const noexcept { return latest_ns_; }

 private:
  struct Proc {  // one process in one kept pass
    int pid = 0;
    std::optional<double> cpu_pct, runq_delay_pct, ics, vcs, read_bps, rchar_ps;
    std::optional<double> threads, active_threads, wait_per_slice;
    std::optional<int64_t> rss;
  };
  struct Pass {
    int64_t t_ns = 0;
    int64_t seq = 0;
    sample::MachineSample machine;
    std::vector<Proc> procs;
    std::vector<std::pair<int, int64_t>> open_fds;  // (pid, fds) where read in this pass
  };
  struct Sum {
    double sum = 0;
    int n = 0;
    void add(const std::optional<double>& v) {
      if (v) sum += *v, ++n;
    }
    std::optional<double> mean() const { return n ? std::optional<double>(sum / n) : std::nullopt; }
  };
  struct PidTotals {
    int64_t first_ns = 0, last_ns = 0;
    int64_t first_seq = 0, last_seq = 0;
    int samples = 0;
    Sum cpu, runq, ics, vcs, read_bps, rchar_ps;
    Sum threads, active, wait_per_slice;
    std::optional<int64_t> open_fds_max, rss_max;
  };

  std::deque<Pass> passes_kept_;
  std::unordered_map<int, PidTotals> pids_;
  int64_t passes_ = 0;
  int64_t latest_ns_ = 0;
  Sum m_cpu_busy_, m_cpu_steal_, m_io_, m_cpu_p_, m_mem_p_;
  std::optional<int64_t> m_mem_min_;
  std::optional<int64_t> m_shm_max_, m_shm_min_, m_shm_total_;
  Sum m_swap_in_, m_swap_out_;
  std::optional<int64_t> m_mem_last_;
};

}  // namespace dldoctor::analyze
