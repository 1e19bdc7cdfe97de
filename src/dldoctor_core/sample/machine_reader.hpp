// Machine-wide figures of a pass: CPU busy share, available memory, swap rates, pressure (PSI)
// and /dev/shm use. Keeps its few files open and the last counters, for rates.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "dldoctor_core/sample/cpu_times.hpp"
#include "dldoctor_core/sample/proc_file.hpp"
#include "dldoctor_core/sample/snapshot.hpp"
#include "dldoctor_core/sample/vmstat.hpp"

namespace dldoctor::sample {

/// Reads the machine part of a pass.
class MachineReader {
 public:
  /// `shm_path`: the shared-memory mount DataLoader workers pass tensors through.
  explicit MachineReader(std::string shm_path = "/dev/shm");

  /// The machine at `t_ns` (CLOCK_MONOTONIC); rates against the previous call, empty on the
  /// first. Only /proc/stat (CPU busy, and the fork counter the tree needs) is read every call;
  /// meminfo, /dev/shm, vmstat (swap) and PSI only when `slow` (and on the first call): PSI's
  /// avg10 is already a 10 s average, memory and swap move over seconds, and every read costs
  /// several microseconds with cold caches. In between, their last values are repeated.
  MachineSample read(int64_t t_ns, ReadBuffer& buf, bool slow = true) noexcept;

  /// Processes and threads created since boot, as of the last read (from /proc/stat).
  std::optional<int64_t> forks() const noexcept { return forks_; }

 private:
  FdBudget budget_{6};  // the machine's own files, outside the per-process budget
  ProcFile stat_, meminfo_, vmstat_, cpu_pressure_, io_pressure_, mem_pressure_;
  std::string shm_path_;
  int64_t last_t_ns_ = 0;
  std::optional<CpuTimes> last_cpu_;
  int64_t last_slow_t_ns_ = 0;
  SwapCounts last_swap_;
  MachineSample slow_;  // the swap and pressure figures of the last slow read
  std::optional<int64_t> forks_;
};

}  // namespace dldoctor::sample
