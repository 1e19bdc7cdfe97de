// The largest batch that fits on a GPU, from the peaks seen (field guide cause 7): a step's
// peak CUDA memory is close to linear in the batch size, a fixed part (weights, gradients,
// optimizer state, workspaces) plus activations per sample. Pure functions, so the
// estimator is tested on recorded figures without a GPU. Shared by cuda_oom and
// cuda_oom_risk, with the reader of torch's out-of-memory text and their common evidence.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dldoctor_core/analyze/failure_log.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze {

/// Share of the device kept free when sizing a batch: the caching allocator reserves more
/// than it hands out (fragmentation), cuDNN and cuBLAS workspaces come and go, and other
/// processes (NCCL, a second job) hold some. A step planned within a tenth of the total
/// fails on its first unlucky allocation; torch reports it as out of memory with gigabytes
/// "reserved but unallocated".
inline constexpr double kCudaKeepFreeFraction = 0.10;

/// Peak memory of the steps at one batch size.
struct PeakSample {
  int batch_size = 0;
  int64_t peak_bytes = 0;                 ///< torch.cuda.max_memory_allocated over the steps
  std::optional<int64_t> baseline_bytes;  ///< memory_allocated between steps, if read
  /// The step failed (out of memory): peak_bytes is what it had plus what it asked for,
  /// a lower bound of what it needed.
  bool lower_bound = false;
};

/// The fitted model and the batch size it allows.
struct BatchFit {
  int largest_batch_size = 0;      ///< 0: not even one sample fits the budget
  double fixed_bytes = 0;          ///< independent of the batch
  double per_sample_bytes = 0;     ///< activations and their gradients per sample
  int64_t budget_bytes = 0;        ///< total × (1 − kCudaKeepFreeFraction)
  int batch_sizes = 0;             ///< distinct batch sizes the fit used
  bool capped_by_failure = false;  ///< held below a batch size that failed
};

/// The largest batch size whose predicted peak stays within the budget of a device of
/// `total_bytes`. Two or more batch sizes: a least-squares line through the peaks. One:
/// the fixed part is the memory held between steps when known, else 0 (all of the peak
/// counted per sample: a smaller, safer answer). A batch size that failed caps the answer
/// below it. Empty when there is no usable point or the total is unknown.
std::optional<BatchFit> largest_fitting_batch(const std::vector<PeakSample>& peaks,
                                              int64_t total_bytes) noexcept;

/// The figures in torch's out-of-memory message (empty where the text lacks them).
struct CudaOomText {
  std::optional<int> device;
  std::optional<int64_t> tried_bytes;                 ///< "Tried to allocate 2.00 GiB"
  std::optional<int64_t> total_bytes;                 ///< "total capacity of 79.15 GiB"
  std::optional<int64_t> free_bytes;                  ///< "of which 1.06 GiB is free"
  std::optional<int64_t> allocated_bytes;             ///< "76.50 GiB is allocated by PyTorch"
  std::optional<int64_t> reserved_unallocated_bytes;  ///< "reserved by PyTorch but unallocated"
};

/// Reads torch's "CUDA out of memory" text, in the torch >= 2.1 wording and the older one
/// ("(GPU 0; 7.79 GiB total capacity; 6.21 GiB already allocated; ...)").
CudaOomText parse_cuda_oom(std::string_view message) noexcept;

/// The peaks of `loader` (all loaders when < 0) on `device`, as the estimator's samples.
std::vector<PeakSample> peak_samples(const FailureView& failures, int loader, int device);

/// largest_batch_size_that_fits, per_sample_bytes, fixed_bytes, budget_bytes,
/// batch_sizes_measured (when there is a fit).
void add_fit_evidence(report::Finding& f, const std::optional<BatchFit>& fit);

/// "batch_size=60 is the largest that fits with 10% of the GPU kept free (with 2 steps of
/// gradient accumulation ...)", or what to do when nothing is known to fit.
std::string batch_advice(const std::optional<BatchFit>& fit, std::optional<int> current);

}  // namespace dldoctor::analyze
