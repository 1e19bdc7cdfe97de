// cuda_oom (seed cause 7): the job raised CUDA out of memory. The fix is the largest batch
// that fits, estimated from the peaks seen at each batch size and the failed step's own
// request (analyze/cuda_memory).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/cuda_memory.hpp"
#include "dldoctor_core/analyze/view.hpp"

namespace dldoctor::analyze::cuda_oom {

/// The first CUDA out-of-memory error of the window, else null (cuda_oom_risk asks too:
/// the failure says more than the risk would).
const ErrorNote* first_oom(const FailureView& failures) noexcept;

struct Evidence {
  report::Rank rank;
  int loader = -1;
  std::optional<int> batch_size;  ///< of the loader the GPU steps on
  CudaOomText text;               ///< what torch's message says
  int64_t peak_bytes = 0;         ///< the highest peak seen on the device
  std::optional<int64_t> total_bytes;
  std::optional<BatchFit> fit;
  std::string error;  ///< the line of the error text that names it
};
std::optional<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::cuda_oom
