// The job's own cgroup as read while it ran, else the watcher's at the start (the same one in
// a container).
#include "dldoctor_core/analyze/memory.hpp"

#include "dldoctor_core/analyze/data_bound.hpp"
#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze {

Memory memory_of(const JobView& job) {
  Memory m;
  const auto& mem = job.facts.memory;
  m.available_bytes = job.machine.mem_available_min_bytes ? job.machine.mem_available_min_bytes
                                                          : mem.available_bytes;
  m.total_bytes = mem.total_bytes;
  if (m.available_bytes && mem.total_bytes && *mem.total_bytes > 0)
    m.available_fraction = double(*m.available_bytes) / double(*mem.total_bytes);
  if (const auto& c = job.failures.cgroup_memory; c && c->limit_bytes && c->usage_bytes) {
    m.cgroup_limit = c->limit_bytes;
    m.cgroup_usage = c->usage_bytes;
  } else if (mem.cgroup_limit_bytes) {
    m.cgroup_limit = mem.cgroup_limit_bytes;
    m.cgroup_usage =
        mem.cgroup_working_set_bytes ? mem.cgroup_working_set_bytes : mem.cgroup_usage_bytes;
  }
  if (m.cgroup_limit && m.cgroup_usage && *m.cgroup_limit > 0)
    m.cgroup_headroom_fraction =
        double(*m.cgroup_limit - *m.cgroup_usage) / double(*m.cgroup_limit);
  m.swap_in = job.machine.swap_in_per_s;
  m.swap_out = job.machine.swap_out_per_s;
  m.pressure = job.machine.mem_pressure_some;
  return m;
}

report::Rank memory_rank(const Memory& m, const JobView& job) {
  bool any_stalled = false;
  for (const LoaderView& l : job.loaders) any_stalled = any_stalled || stalled(l);
  // Thrashing while the loop waits for batches is the bottleneck; low memory alone is a risk.
  const bool thrashing = m.thrashing();
  return {thrashing && any_stalled ? report::Severity::kCritical : report::Severity::kWarning,
          report::Tier::kMeasure, thrashing ? kThrashingScore : kLowMemoryScore};
}

void add_memory_evidence(report::Finding& f, const Memory& m) {
  if (m.available_bytes) f.add("mem_available_min_bytes", double(*m.available_bytes));
  if (m.total_bytes) f.add("mem_total_bytes", double(*m.total_bytes));
  if (m.cgroup_limit) f.add("cgroup_memory_limit_bytes", double(*m.cgroup_limit));
  if (m.cgroup_usage) f.add("cgroup_memory_usage_bytes", double(*m.cgroup_usage));
  if (m.cgroup_headroom_fraction) f.add("cgroup_headroom_fraction", *m.cgroup_headroom_fraction);
  if (m.swap_in) f.add("swap_in_pages_per_s", *m.swap_in);
  if (m.swap_out) f.add("swap_out_pages_per_s", *m.swap_out);
  if (m.pressure) f.add("memory_pressure_some_pct", *m.pressure);
}

std::string short_sentence(const Memory& m) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (m.available_fraction && *m.available_fraction < kLowMemoryFraction)
    add(num(*m.available_fraction * 100) + "% of RAM available");
  if (m.cgroup_headroom_fraction && *m.cgroup_headroom_fraction < kLowMemoryFraction)
    add("the memory cgroup at " + num((1 - *m.cgroup_headroom_fraction) * 100) + "% of its limit");
  if (m.swapping()) add("swapping");
  if (m.pressured()) add("tasks stalled on memory " + num(*m.pressure) + "% of the time");
  return s;
}

}  // namespace dldoctor::analyze
