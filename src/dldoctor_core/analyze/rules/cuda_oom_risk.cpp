// The score is the share of the device the peak takes: the closer to full, the sooner a
// larger input fails.
#include "dldoctor_core/analyze/rules/cuda_oom_risk.hpp"

#include "dldoctor_core/analyze/rules/cuda_oom.hpp"
#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::cuda_oom_risk {

std::optional<Evidence> detect(const JobView& job) {
  if (cuda_oom::first_oom(job.failures)) return std::nullopt;  // the failure says more
  for (const CudaPeak& p : job.failures.cuda) {
    if (!p.total_bytes || *p.total_bytes <= 0) continue;
    if (double(p.peak_bytes) < (1.0 - kCudaKeepFreeFraction) * double(*p.total_bytes)) continue;
    Evidence e;
    e.rank = {report::Severity::kWarning, report::Tier::kMeasure,
              double(p.peak_bytes) / double(*p.total_bytes)};
    e.peak = p;
    e.fit = largest_fitting_batch(peak_samples(job.failures, p.loader, p.device), *p.total_bytes);
    return e;  // one device is enough to say it
  }
  return std::nullopt;
}

report::Finding finding(const Evidence& e) {
  const CudaPeak& p = e.peak;
  report::Finding f = report::make_finding("cuda_oom_risk", p.loader, e.rank);
  f.title = "GPU memory peaks at " + num(100.0 * double(p.peak_bytes) / double(*p.total_bytes)) +
            "% of cuda:" + std::to_string(p.device) +
            " at batch_size=" + std::to_string(p.batch_size) +
            ": one larger batch or input from out of memory";
  f.add("batch_size", double(p.batch_size));
  f.add("peak_allocated_bytes", double(p.peak_bytes));
  f.add("gpu_total_bytes", double(*p.total_bytes));
  f.add("headroom_bytes", double(*p.total_bytes - p.peak_bytes));
  if (p.baseline_bytes) f.add("allocated_between_steps_bytes", double(*p.baseline_bytes));
  add_fit_evidence(f, e.fit);
  f.fix = "Keep the batch at or below what fits: " + batch_advice(e.fit, p.batch_size) +
          "; variable-size inputs (longer sequences, larger images) raise the peak further, "
          "so cap them or bucket by size.";
  f.why =
      "The caching allocator needs room beyond the peak (fragmentation, workspaces); "
      "within " +
      num(kCudaKeepFreeFraction * 100) +
      "% of the device, a larger batch or "
      "input raises CUDA out of memory.";
  return f;
}

}  // namespace dldoctor::analyze::cuda_oom_risk
