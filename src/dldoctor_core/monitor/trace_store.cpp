// Appends under a mutex on the drain and sampler threads: a copy per event, no parsing.
#include "dldoctor_core/monitor/trace_store.hpp"

#include <algorithm>

namespace dldoctor::monitor {

void TraceStore::ingest(const std::vector<trace::Event>& events) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t room = max_ > c_.events.size() ? max_ - c_.events.size() : 0;
  const size_t n = std::min(room, events.size());
  c_.events.insert(c_.events.end(), events.begin(), events.begin() + ptrdiff_t(n));
  c_.dropped_events += events.size() - n;
}

void TraceStore::ingest(const sample::Snapshot& s) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = 1 + s.processes.size() + s.gpu.devices.size();
  if (c_.machine.size() + c_.processes.size() + c_.gpus.size() + n > max_) {
    c_.dropped_counters += n;
    return;
  }
  MachineCounter m;
  m.t_ns = s.t_ns;
  m.cpu_busy_pct = s.machine.cpu_busy_pct;
  m.shm_used_bytes = s.machine.shm_used_bytes;
  m.shm_total_bytes = s.machine.shm_total_bytes;
  m.mem_available_bytes = s.machine.mem_available_bytes;
  c_.machine.push_back(m);
  for (const sample::ProcessSample& ps : s.processes) {
    c_.processes.push_back(ProcessCounter{s.t_ns, ps.pid, ps.state, ps.cpu_pct});
  }
  for (const sample::GpuSample& g : s.gpu.devices) {
    c_.gpus.push_back(
        GpuCounter{s.t_ns, g.index, g.utilization_pct, g.memory_used_bytes, g.tree_memory_bytes});
  }
}

TraceContents TraceStore::contents() const {
  std::lock_guard<std::mutex> lock(mu_);
  TraceContents out = c_;
  out.max_events = max_;
  return out;
}

}  // namespace dldoctor::monitor
