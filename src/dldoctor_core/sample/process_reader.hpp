// One watched process across passes: its kept-open files, its threads, and the counters of
// the last pass that its rates are computed against. A reader belongs to one process (pid +
// start time); when the pid is reused, the sampler starts a new reader.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dldoctor_core/sample/io.hpp"
#include "dldoctor_core/sample/proc_file.hpp"
#include "dldoctor_core/sample/snapshot.hpp"

namespace dldoctor::sample {

/// What every process read of one pass shares.
struct PassContext {
  ReadBuffer& buf;          ///< scratch for every file of the pass
  FdBudget& budget;         ///< descriptors that may be kept open
  uint64_t pass = 0;        ///< this sampler's pass number, from 1
  bool threads = false;     ///< fill ProcessSample::threads
  int slow_every = 10;      ///< status and io every Nth pass; fd count and the wait channel of
                            ///< sleepers every 5N-th
  std::vector<int> tids{};  ///< scratch for thread ids
};

/// How a read ended.
enum class ReadStatus {
  ok,
  gone,           ///< the process has exited (or its stat cannot be read): leave it out
  other_process,  ///< the pid now belongs to a process with another start time
};

/// Reads one process pass after pass.
class ProcessReader {
 public:
  /// A reader for `pid`; keeps its stat open if `budget` allows.
  ProcessReader(int pid, FdBudget& budget);

  /// Reads one pass into `out`, with rates against this reader's previous pass. smaps_rollup
  /// is not read here (see read_smaps); `out` gets its last values.
  ReadStatus read(PassContext& ctx, ProcessSample& out);

  /// Reads smaps_rollup into `out` and keeps the values for later passes; returns what the
  /// read cost in thread CPU ns (it grows with the pages mapped: ~4 ms for a process that
  /// imported torch), which the sampler budgets.
  int64_t read_smaps(ReadBuffer& buf, uint64_t pass, ProcessSample& out);

  /// How long the process has existed (from its start time in stat), as of `boot_now_ns`
  /// (CLOCK_BOOTTIME); unknown before the first read.
  std::optional<int64_t> age_ns(int64_t boot_now_ns) const noexcept;

  /// The pass of the last smaps_rollup read (0: never).
  uint64_t smaps_pass() const noexcept { return smaps_pass_; }

  /// How many of the sampler's smaps periods (SamplerOptions::smaps_every) its next
  /// smaps_rollup read waits (next_smaps_backoff): 1 while the process's private memory grows
  /// by kSmapsGrowingBytesPerS or more, doubling up to kSmapsMaxBackoff while it grows more
  /// slowly. The series is read for a growth (cow_memory_growth), which a slow one shows as
  /// well over fewer reads, and each read walks every page the process maps (~4 ms for a
  /// worker of a process that imported torch).
  uint32_t smaps_backoff() const noexcept { return smaps_backoff_; }
  static constexpr int64_t kSmapsGrowingBytesPerS = 1 << 20;
  static constexpr uint32_t kSmapsMaxBackoff = 8;
  /// The backoff after a read that found private_dirty at `now` bytes, `dt_ns` after one
  /// that found `before` (a second at least). The test is a rate: a list-backed dataset's
  /// workers copy ~0.4 MiB/s each, which a bytes-per-read test (1 MiB) called growing at
  /// every other read as the gap doubled, so they were read every 1-2 periods, not every 8.
  static uint32_t next_smaps_backoff(uint32_t backoff, std::optional<int64_t> before,
                                     std::optional<int64_t> now, int64_t dt_ns) noexcept;

 private:
  struct ThreadState {
    ProcFile schedstat;
    ProcFile stat;  // opened only when thread sampling is on
    std::optional<int64_t> run_ns, wait_ns, ticks;
    std::optional<int64_t> slices;  // schedstat's times given a CPU
    uint64_t seen = 0;
  };

  /// Lists the threads to read into ctx.tids: all of task/ when needed, else the pid alone.
  void list_threads(PassContext& ctx, int64_t num_threads);
  /// The wait channel, read now.
  std::string read_wchan(ReadBuffer& buf);
  /// Reads the slow sources (status, io; the fd count too when `rare`) and keeps their values
  /// for later passes.
  void read_slow(PassContext& ctx, int64_t t_ns, bool rare);

  /// Slow passes per rare one (fd count, wait channel of a sleeper): they change seldom, and
  /// the fd_limit and hang questions they answer are asked over tens of seconds.
  static constexpr uint64_t kRareEvery = 5;

  int pid_;
  ProcFile stat_;
  // Opened at their first read, kept only from the spare half of the budget: stat and
  // schedstat, read every pass, come first when descriptors are scarce.
  ProcFile status_, io_file_, wchan_file_;
  ProcDir fd_dir_, task_dir_;
  bool slow_opened_ = false;
  bool task_opened_ = false;
  std::optional<int64_t> start_ticks_;
  uint64_t reads_ = 0;

  // The previous pass, for rates.
  int64_t last_t_ns_ = 0;
  std::optional<int64_t> last_ticks_, last_minflt_, last_majflt_;
  std::unordered_map<int, ThreadState> threads_;

  // The slow sources, carried between the passes that read them.
  int64_t last_slow_t_ns_ = 0;
  std::optional<int64_t> last_voluntary_, last_involuntary_;
  std::optional<double> voluntary_per_s_, involuntary_per_s_;
  IoFields io_;
  std::optional<double> rchar_per_s_, read_bytes_per_s_;
  std::optional<int64_t> status_rss_bytes_, pss_bytes_, private_dirty_bytes_, open_fds_;
  uint64_t smaps_pass_ = 0;
  int64_t smaps_t_ns_ = 0;  ///< when smaps_rollup was last read (0: never)
  uint32_t smaps_backoff_ = 1;
  std::string wchan_;
  bool wchan_fresh_ = false;  // wchan_ was read while the process slept, and it still sleeps
};

}  // namespace dldoctor::sample
