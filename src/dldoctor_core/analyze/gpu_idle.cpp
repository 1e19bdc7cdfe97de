// The idle share is a mean over the sampler's passes (each reads NVML's last sample period of
// 1/6 s to 1 s): over a window of seconds that is the share of the loop no kernel ran.
#include "dldoctor_core/analyze/gpu_idle.hpp"

#include <algorithm>

#include "dldoctor_core/analyze/failure_log.hpp"
#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze {

namespace {

bool used_cuda(const JobView& job) {
  if (!job.failures.cuda.empty()) return true;
  return std::any_of(
      job.failures.errors.begin(), job.failures.errors.end(),
      [](const ErrorNote& e) { return classify_error(e.type, e.message) == ErrorKind::kCudaOom; });
}

}  // namespace

GpuIdle gpu_idle(const JobView& job) {
  GpuIdle g;
  const GpuView& v = job.gpu;
  if (!v.measured) {
    g.unknown =
        "GPU not measured: " +
        (v.not_measured.empty() ? std::string("no GPU reading in this window") : v.not_measured);
    return g;
  }
  bool any_job = false;
  for (const GpuDeviceView& d : v.devices) any_job = any_job || d.job;
  if (!any_job) {
    if (v.devices.empty() || !used_cuda(job)) {
      g.unknown = v.devices.empty() ? std::string("no GPU: NVML lists none")
                                    : "the job used no GPU (none of its processes on the " +
                                          count_of(int(v.devices.size()), "GPU") + " NVML lists)";
      return g;
    }
    g.attributed = false;  // it used CUDA, but NVML does not show its pids: count them all
  }
  double sum = 0;
  for (const GpuDeviceView& d : v.devices) {
    if ((any_job && !d.job) || !d.utilization_pct) continue;
    sum += *d.utilization_pct;
    ++g.devices;
  }
  if (g.devices == 0) {
    g.unknown = "GPU utilization not measured: NVML refuses it for the job's GPU (MIG?)";
    return g;
  }
  g.utilization_pct = sum / g.devices;
  g.idle_fraction = std::clamp(1.0 - *g.utilization_pct / 100.0, 0.0, 1.0);
  return g;
}

void add_gpu_idle_evidence(report::Finding& f, const GpuIdle& g,
                           std::optional<double> data_stall_fraction) {
  if (!g.idle_fraction) {
    f.add("gpu_idle", g.unknown);
    return;
  }
  f.add("gpu_idle_fraction", *g.idle_fraction);
  f.add("gpu_utilization_pct", *g.utilization_pct);
  std::string s =
      std::string(g.devices == 1 ? "the GPU" : "the job's " + std::to_string(g.devices) + " GPUs") +
      " ran no kernel " + num(*g.idle_fraction * 100) + "% of the loop";
  if (data_stall_fraction)
    s +=
        " while the main process waited for batches " + num(*data_stall_fraction * 100) + "% of it";
  s += " (NVML utilization: the share of time a kernel was running, not how busy the GPU was)";
  if (!g.attributed)
    s += "; no process of the job was found on a GPU (another pid namespace?), so every GPU "
         "was counted";
  f.add("gpu_idle", s);
}

}  // namespace dldoctor::analyze
