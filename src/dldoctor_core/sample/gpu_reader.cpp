// Two NVML calls per device and pass (utilization, memory), and one more per device on slow
// passes (the compute processes): a few tens of microseconds each on a real driver.
#include "dldoctor_core/sample/gpu_reader.hpp"

#include <algorithm>

namespace dldoctor::sample {

GpuPass GpuReader::read(const std::vector<int>& tree_pids, bool slow) {
  GpuPass pass;
  if (!nvml_.ok()) {
    pass.not_measured = nvml_.error();
    return pass;
  }
  pass.measured = true;
  const bool lists = slow || last_.size() != size_t(nvml_.device_count());
  std::vector<int> tree = tree_pids;
  std::sort(tree.begin(), tree.end());
  for (int i = 0; i < nvml_.device_count(); ++i) {
    GpuSample g;
    g.index = nvml_.index(i);
    if (auto u = nvml_.utilization(i)) g.utilization_pct = double(*u.value);
    if (auto m = nvml_.memory(i)) {
      g.memory_used_bytes = m.value->used;
      g.memory_total_bytes = m.value->total;
    }
    if (lists) {
      if (auto procs = nvml_.compute_processes(i)) {
        std::optional<int64_t> mine = 0;
        for (const system::NvmlProcess& p : *procs.value) {
          if (!std::binary_search(tree.begin(), tree.end(), p.pid)) continue;
          g.tree_pids.push_back(p.pid);
          // One process whose memory NVML cannot tell makes the sum unknown, not smaller.
          if (mine && p.used_bytes)
            *mine += *p.used_bytes;
          else
            mine.reset();
        }
        g.tree_memory_bytes = mine;
      }
    } else if (size_t(i) < last_.size()) {
      g.tree_memory_bytes = last_[size_t(i)].tree_memory_bytes;
      g.tree_pids = last_[size_t(i)].tree_pids;
    }
    pass.devices.push_back(std::move(g));
  }
  last_ = pass.devices;
  return pass;
}

}  // namespace dldoctor::sample
