// The failed step needed at least what PyTorch held plus what it asked for: that lower
// bound joins the peaks seen, and caps the batch that fits below it.
#include "dldoctor_core/analyze/rules/cuda_oom.hpp"

#include <algorithm>

#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::cuda_oom {

namespace {

/// The loader whose batches the GPU steps on: the named one, else the one with a batch
/// size and the most batches.
const LoaderView* stepping_loader(const JobView& job, int named) {
  const LoaderView* best = nullptr;
  for (const LoaderView& l : job.loaders) {
    if (l.loader == named) return &l;
    if (l.config.batch_size && (!best || l.batches > best->batches)) best = &l;
  }
  return best;
}

}  // namespace

const ErrorNote* first_oom(const FailureView& failures) noexcept {
  for (const ErrorNote& e : failures.errors)
    if (classify_error(e.type, e.message) == ErrorKind::kCudaOom) return &e;
  return nullptr;
}

std::optional<Evidence> detect(const JobView& job) {
  const ErrorNote* oom = first_oom(job.failures);
  if (!oom) return std::nullopt;
  Evidence e;
  e.rank = {report::Severity::kCritical, report::Tier::kFailure, 0.0};
  e.text = parse_cuda_oom(oom->message);
  const LoaderView* l = stepping_loader(job, oom->loader);
  e.loader = l ? l->loader : -1;
  e.batch_size = l ? l->config.batch_size : std::nullopt;
  const int device = e.text.device.value_or(0);
  std::vector<PeakSample> samples = peak_samples(job.failures, e.loader, device);
  e.total_bytes = e.text.total_bytes ? e.text.total_bytes : oom->cuda_total_bytes;
  e.peak_bytes = oom->cuda_peak_bytes.value_or(0);
  for (const CudaPeak& p : job.failures.cuda) {
    if (p.device != device) continue;
    if (!e.total_bytes) e.total_bytes = p.total_bytes;
    e.peak_bytes = std::max(e.peak_bytes, p.peak_bytes);
  }
  if (e.batch_size && e.text.allocated_bytes && e.text.tried_bytes)
    samples.push_back(PeakSample{*e.batch_size, *e.text.allocated_bytes + *e.text.tried_bytes,
                                 std::nullopt, true});
  if (e.total_bytes) e.fit = largest_fitting_batch(samples, *e.total_bytes);
  e.error = error_line(oom->message, ErrorKind::kCudaOom);
  return e;
}

report::Finding finding(const Evidence& e) {
  const CudaOomText& t = e.text;
  const auto& fit = e.fit;
  const auto& bs = e.batch_size;
  const auto& total = e.total_bytes;
  report::Finding f = report::make_finding("cuda_oom", e.loader, e.rank);
  f.title = "CUDA ran out of memory" +
            (bs ? " at batch_size=" + std::to_string(*bs) : std::string()) +
            (fit && fit->largest_batch_size >= 1
                 ? ": batch_size=" + std::to_string(fit->largest_batch_size) + " fits"
                 : std::string());
  if (bs) f.add("batch_size", double(*bs));
  if (e.peak_bytes > 0) f.add("peak_allocated_bytes", double(e.peak_bytes));
  if (total) f.add("gpu_total_bytes", double(*total));
  if (t.tried_bytes) f.add("tried_to_allocate_bytes", double(*t.tried_bytes));
  if (t.allocated_bytes) f.add("allocated_by_pytorch_bytes", double(*t.allocated_bytes));
  if (t.free_bytes) f.add("gpu_free_bytes", double(*t.free_bytes));
  if (t.reserved_unallocated_bytes)
    f.add("reserved_unallocated_bytes", double(*t.reserved_unallocated_bytes));
  add_fit_evidence(f, fit);
  f.add("error", e.error);
  f.fix = "Use a smaller batch: " + batch_advice(fit, bs) +
          ". Or need less per sample: mixed precision (torch.autocast), activation "
          "checkpointing, a smaller input size." +
          (t.reserved_unallocated_bytes && total &&
                   double(*t.reserved_unallocated_bytes) > 0.05 * double(*total)
               ? " " + bytes_text(double(*t.reserved_unallocated_bytes)) +
                     " was reserved but unallocated: set PYTORCH_CUDA_ALLOC_CONF="
                     "expandable_segments:True to cut fragmentation."
               : std::string());
  f.why =
      "A step's peak GPU memory is the fixed part (weights, gradients, optimizer state) "
      "plus activations that grow with the batch; when it passes the device's memory "
      "the allocation fails and the step raises. The largest batch that fits is "
      "estimated from the peaks seen (" +
      (fit ? std::to_string(fit->batch_sizes) + " batch size" + (fit->batch_sizes == 1 ? "" : "s")
           : std::string("none")) +
      ") and the failed step's own request.";
  return f;
}

}  // namespace dldoctor::analyze::cuda_oom
