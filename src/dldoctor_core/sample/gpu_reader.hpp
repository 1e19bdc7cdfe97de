// The GPU part of a sampler pass: per device the utilization and memory NVML reports, and
// the memory of the sampled tree's own processes (from NVML's compute-process list, matched
// by pid). Without NVML the pass says why the GPU was not measured; a figure NVML refuses
// for one device stays unknown, never 0.
#pragma once

#include <vector>

#include "dldoctor_core/sample/snapshot.hpp"
#include "dldoctor_core/system/nvml.hpp"

namespace dldoctor::sample {

/// Reads the GPUs for the sampler thread (one reader per sampler; not thread-safe).
class GpuReader {
 public:
  explicit GpuReader(const system::Nvml& nvml) : nvml_(nvml) {}

  /// The GPUs now. `tree_pids`: the pass's processes. The process lists are read when
  /// `slow` (and on the first call); in between their last figures are repeated: the set of
  /// processes on a GPU changes at CUDA start and exit, not from one pass to the next.
  GpuPass read(const std::vector<int>& tree_pids, bool slow);

 private:
  const system::Nvml& nvml_;
  std::vector<GpuSample> last_;  // the previous pass, for the slow fields
};

}  // namespace dldoctor::sample
