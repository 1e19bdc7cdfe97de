// Conversions only; tuples for the bulk records because a trace may hold a million of them.
#include "monitor_convert.hpp"

#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <vector>

#include "event_glue.hpp"
#include "optional.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {

namespace {
nb::list opt_list(const std::vector<std::optional<double>>& v) {
  return list_of(v, [](const std::optional<double>& x) { return opt(x); });
}

nb::list float_list(const std::vector<float>& v) {
  nb::list out;
  for (float x : v) out.append(double(x));
  return out;
}
}  // namespace

nb::dict series_to_dict(const monitor::SeriesData& d) {
  nb::dict out;
  out["t0_ns"] = d.t0_ns;
  out["interval_s"] = double(d.width_ns) / 1e9;
  nb::list t;
  for (double x : d.t_s) t.append(x);
  out["t_s"] = t;
  nb::list loaders;
  for (const auto& l : d.loaders) {
    nb::dict x;
    x["loader"] = int(l.loader);
    x["batches"] = l.batches;
    x["batches_per_s"] = opt_list(l.batches_per_s);
    x["data_stall_pct"] = opt_list(l.data_stall_pct);
    loaders.append(x);
  }
  out["loaders"] = loaders;
  nb::list procs;
  for (const auto& p : d.processes) {
    nb::dict x;
    x["role"] = p.role;
    x["loader"] = p.loader >= 0 ? nb::cast(p.loader) : nb::none();
    x["worker"] = p.worker >= 0 ? nb::cast(p.worker) : nb::none();
    nb::list pids;
    for (int pid : p.pids) pids.append(pid);
    x["pids"] = pids;
    x["batches"] = p.batches;
    x["cpu_pct"] = opt_list(p.cpu_pct);
    x["runq_delay_pct"] = opt_list(p.runq_delay_pct);
    x["getitem_ms"] = opt_list(p.getitem_ms);
    x["collate_ms"] = opt_list(p.collate_ms);
    x["state"] = p.state;
    x["getitem_ms_sample"] = float_list(p.getitem_ms_sample);
    x["collate_ms_sample"] = float_list(p.collate_ms_sample);
    procs.append(x);
  }
  out["processes"] = procs;
  nb::dict m;
  m["cpu_busy_pct"] = opt_list(d.machine.cpu_busy_pct);
  m["shm_used_bytes"] = opt_list(d.machine.shm_used_bytes);
  m["mem_available_bytes"] = opt_list(d.machine.mem_available_bytes);
  m["read_mb_per_s"] = opt_list(d.machine.read_mb_per_s);
  m["rchar_mb_per_s"] = opt_list(d.machine.rchar_mb_per_s);
  m["shm_total_bytes"] = opt(d.machine.shm_total_bytes);
  out["machine"] = m;
  out["processes_cut"] = d.processes_cut;
  out["gpus"] = list_of(d.gpus, [](const monitor::GpuSeries& g) {
    nb::dict x;
    x["index"] = g.index;
    x["job"] = g.job;
    x["utilization_pct"] = opt_list(g.utilization_pct);
    x["memory_used_bytes"] = opt_list(g.memory_used_bytes);
    x["job_memory_bytes"] = opt_list(g.job_memory_bytes);
    x["memory_total_bytes"] = opt(g.memory_total_bytes);
    return x;
  });
  out["gpu_not_measured"] = d.gpu_not_measured;
  return out;
}

nb::dict live_to_dict(const monitor::LiveData& d) {
  nb::dict out;
  out["t_ns"] = d.t_ns;
  out["window_s"] = d.window_s;
  nb::list loaders;
  for (const auto& l : d.loaders) {
    nb::dict x;
    x["loader"] = int(l.loader);
    x["num_workers"] = l.num_workers;
    x["batches"] = l.batches;
    x["batches_per_s"] = opt(l.batches_per_s);
    x["data_stall_pct"] = opt(l.data_stall_pct);
    loaders.append(x);
  }
  out["loaders"] = loaders;
  nb::list procs;
  for (const auto& p : d.processes) {
    nb::dict x;
    x["role"] = p.role;
    x["loader"] = p.loader >= 0 ? nb::cast(p.loader) : nb::none();
    x["worker"] = p.worker >= 0 ? nb::cast(p.worker) : nb::none();
    x["pid"] = p.pid;
    x["state"] = std::string(1, p.state);
    x["cpu_pct"] = opt(p.cpu_pct);
    x["runq_delay_pct"] = opt(p.runq_delay_pct);
    x["getitem_ms"] = opt(p.getitem_ms);
    x["batches"] = p.batches;
    procs.append(x);
  }
  out["processes"] = procs;
  nb::dict m;
  m["cpu_busy_pct"] = opt(d.cpu_busy_pct);
  m["shm_used_bytes"] = opt(d.shm_used_bytes);
  m["shm_total_bytes"] = opt(d.shm_total_bytes);
  m["mem_available_bytes"] = opt(d.mem_available_bytes);
  out["machine"] = m;
  out["gpus"] = list_of(d.gpus, [](const monitor::LiveData::Gpu& g) {
    nb::dict x;
    x["index"] = g.index;
    x["job"] = g.job;
    x["utilization_pct"] = opt(g.utilization_pct);
    x["memory_used_bytes"] = opt(g.memory_used_bytes);
    x["memory_total_bytes"] = opt(g.memory_total_bytes);
    x["job_memory_bytes"] = opt(g.job_memory_bytes);
    return x;
  });
  out["gpu_not_measured"] = d.gpu_not_measured;
  return out;
}

nb::dict trace_to_dict(const monitor::TraceContents& c) {
  nb::list events;
  for (const trace::Event& e : c.events) events.append(event_to_tuple(e));
  nb::list machine;
  for (const auto& m : c.machine) {
    machine.append(nb::make_tuple(m.t_ns, opt(m.cpu_busy_pct), opt(m.shm_used_bytes),
                                  opt(m.shm_total_bytes), opt(m.mem_available_bytes)));
  }
  nb::list procs;
  for (const auto& p : c.processes) {
    procs.append(nb::make_tuple(p.t_ns, p.pid, std::string(1, p.state), opt(p.cpu_pct)));
  }
  nb::list gpus;
  for (const auto& g : c.gpus) {
    gpus.append(nb::make_tuple(g.t_ns, g.index, opt(g.utilization_pct), opt(g.memory_used_bytes),
                               opt(g.job_memory_bytes)));
  }
  nb::dict out;
  out["events"] = events;
  out["machine"] = machine;
  out["processes"] = procs;
  out["gpus"] = gpus;
  out["dropped_events"] = c.dropped_events;
  out["dropped_counters"] = c.dropped_counters;
  out["max_events"] = c.max_events;
  return out;
}

}  // namespace dldoctor::ext
