// Folding the GPU part of sampler passes into a short ring and per-device sums.
#include "dldoctor_core/analyze/gpu_track.hpp"

#include <algorithm>

namespace dldoctor::analyze {

namespace {
void keep_max(std::optional<int64_t>& into, const std::optional<int64_t>& v) {
  if (v) into = std::max(into.value_or(*v), *v);
}
}  // namespace

void GpuTrack::Sums::add(const sample::GpuSample& g) {
  if (g.utilization_pct) util_sum += *g.utilization_pct, ++util_n;
  keep_max(used_max, g.memory_used_bytes);
  if (g.memory_total_bytes) total = g.memory_total_bytes;
  keep_max(job_max, g.tree_memory_bytes);
  job = job || !g.tree_pids.empty();
}

void GpuTrack::ingest(int64_t t_ns, const sample::GpuPass& pass, bool in_loop) {
  latest_ns_ = std::max(latest_ns_, t_ns);
  if (pass.measured) {
    measured_ = true;
  } else {
    not_measured_ = pass.not_measured;
  }
  if (in_loop)
    for (const sample::GpuSample& g : pass.devices)
      if (whole_.count(g.index) || whole_.size() < kMaxDevices) whole_[g.index].add(g);
  kept_.push_back(Pass{t_ns, pass});
  while (!kept_.empty() &&
         (kept_.size() > kKeepPasses || kept_.front().t_ns < latest_ns_ - kKeepNs))
    kept_.pop_front();
}

GpuDeviceView GpuTrack::device_view(int index, const Sums& s) {
  GpuDeviceView d;
  d.index = index;
  d.passes = s.util_n;
  if (s.util_n) d.utilization_pct = s.util_sum / s.util_n;
  d.memory_used_max_bytes = s.used_max;
  d.memory_total_bytes = s.total;
  d.job_memory_max_bytes = s.job_max;
  d.job = s.job;
  return d;
}

GpuView GpuTrack::view(int64_t from_ns, int64_t to_ns) const {
  GpuView v;
  std::map<int, Sums> sums;
  if (from_ns < 0) {
    v.measured = measured_;
    sums = whole_;
  } else {
    for (const Pass& p : kept_) {
      if (p.t_ns < from_ns || p.t_ns > to_ns) continue;
      v.measured = v.measured || p.gpu.measured;
      for (const sample::GpuSample& g : p.gpu.devices)
        if (sums.count(g.index) || sums.size() < kMaxDevices) sums[g.index].add(g);
    }
  }
  if (!v.measured) v.not_measured = not_measured_;
  for (const auto& [index, s] : sums) v.devices.push_back(device_view(index, s));
  return v;
}

}  // namespace dldoctor::analyze
