// A figure NVML refuses for one device (utilization on a MIG-enabled GPU, say) stays unknown;
// the device is still listed.
#include "dldoctor_core/system/gpu.hpp"

namespace dldoctor::system {

GpuFacts read_gpus(const Nvml& nvml) {
  GpuFacts g;
  if (!nvml.ok()) {
    g.not_measured = nvml.error();
    return g;
  }
  g.measured = true;
  g.device_errors = nvml.device_errors();
  if (auto v = nvml.driver_version()) g.driver_version = *v.value;
  for (int i = 0; i < nvml.device_count(); ++i) {
    GpuDevice d;
    d.index = nvml.index(i);
    if (auto n = nvml.name(i)) d.name = *n.value;
    if (auto u = nvml.uuid(i)) d.uuid = *u.value;
    if (auto m = nvml.memory(i)) {
      d.memory_total_bytes = m.value->total;
      d.memory_used_bytes = m.value->used;
    }
    if (auto u = nvml.utilization(i)) d.utilization_pct = *u.value;
    g.devices.push_back(std::move(d));
  }
  return g;
}

}  // namespace dldoctor::system
