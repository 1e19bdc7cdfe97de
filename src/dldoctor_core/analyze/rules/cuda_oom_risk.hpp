// cuda_oom_risk (seed cause 7): no out-of-memory yet, but a step's peak GPU memory leaves
// less than the kept-free share of the device: one larger batch or input from failing. The
// fix is the largest batch that fits (analyze/cuda_memory).
#pragma once

#include <optional>
#include <vector>

#include "dldoctor_core/analyze/cuda_memory.hpp"
#include "dldoctor_core/analyze/view.hpp"

namespace dldoctor::analyze::cuda_oom_risk {

struct Evidence {
  report::Rank rank;
  CudaPeak peak;  ///< the first peak within the kept-free share (one device is enough)
  std::optional<BatchFit> fit;
};
/// Empty when the job already ran out of memory (that is cuda_oom) or every peak leaves room.
std::optional<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::cuda_oom_risk
