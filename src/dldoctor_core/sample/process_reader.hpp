// One watched process across passes: its kept-open files, its threads, and the counters of
// the last pass that its rates are computed against. A reader belongs to one process (pid +
// start time); when the pid is reused, the sampler starts a new reader.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "dldoctor_core/sample/proc_file.hpp"
#include "dldoctor_core/sample/snapshot.hpp"

namespace dldoctor::sample {

/// What every process read of one pass shares.
struct PassContext {
  ReadBuffer& buf;          ///< scratch for every file of the pass
  FdBudget& budget;         ///< descriptors that may be kept open
  uint64_t pass = 0;        ///< this sampler's pass number, from 1
  bool threads = false;     ///< fill ProcessSample::threads
  int slow_every = 10;      ///< status, smaps_rollup, fd count, wchan of sleepers: every Nth pass
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
  /// A reader for `pid`; keeps stat and io open if `budget` allows.
  ProcessReader(int pid, FdBudget& budget);

  /// Reads one pass into `out`, with rates against this reader's previous pass.
  ReadStatus read(PassContext& ctx, ProcessSample& out);

 private:
  struct ThreadState {
    ProcFile schedstat;
    ProcFile stat;  // opened only when thread sampling is on
    std::optional<int64_t> run_ns, wait_ns, ticks;
    uint64_t seen = 0;
  };

  /// Lists the threads to read into ctx.tids: all of task/ when needed, else the pid alone.
  void list_threads(PassContext& ctx, int64_t num_threads) const;
  /// Reads the slow sources (status, smaps_rollup, fd) and keeps their values for later passes.
  void read_slow(PassContext& ctx, int64_t t_ns, char state);

  int pid_;
  ProcFile stat_, io_;
  std::optional<int64_t> start_ticks_;
  uint64_t reads_ = 0;

  // The previous pass, for rates.
  int64_t last_t_ns_ = 0;
  std::optional<int64_t> last_ticks_, last_rchar_, last_read_bytes_;
  std::unordered_map<int, ThreadState> threads_;

  // The slow sources, carried between the passes that read them.
  int64_t last_slow_t_ns_ = 0;
  std::optional<int64_t> last_voluntary_, last_involuntary_;
  std::optional<double> voluntary_per_s_, involuntary_per_s_;
  std::optional<int64_t> status_rss_bytes_, pss_bytes_, private_dirty_bytes_, open_fds_;
  std::string wchan_;
  bool wchan_fresh_ = false;  // wchan_ was read while the process slept, and it still sleeps
};

}  // namespace dldoctor::sample
