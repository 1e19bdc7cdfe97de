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

  /// The machine at `t_ns` (CLOCK_MONOTONIC), read when `slow` (and on the first call), with
  /// rates against the previous read, empty on the first; otherwise the last read again. PSI's
  /// avg10 is already a 10 s average, memory and swap move over seconds, and /proc/stat grows
  /// with CPUs x interrupts (milliseconds on large machines): a second's resolution is enough
  /// and costs a tenth at 10 Hz.
  MachineSample read(int64_t t_ns, ReadBuffer& buf, bool slow = true) noexcept;

  /// Processes and threads created since boot, as of the last read (from /proc/stat).
  std::optional<int64_t> forks() const noexcept { return forks_; }

 private:
  FdBudget budget_{6};  // the machine's own files, outside the per-process budget
  ProcFile stat_, meminfo_, vmstat_, cpu_pressure_, io_pressure_, mem_pressure_;
  std::string shm_path_;
  int64_t last_t_ns_ = 0;  // of the last read
  MachineSample last_;
  std::optional<CpuTimes> last_cpu_;
  SwapCounts last_swap_;
  std::optional<int64_t> forks_;
};

}  // namespace dldoctor::sample
