// Conversions only; tuples for the bulk records because a trace may hold a million of them.
#include "monitor_convert.hpp"

#include <nanobind/stl/string.h>

#include <optional>
#include <string>
#include <vector>

#include "event_glue.hpp"
#include "fields.hpp"
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

/// What a series and a live sample write alike. `value` turns one of their figures into
/// Python: a series holds a list per figure (one value an interval), a live sample one number.
/// The figures, by record:
DLDOCTOR_FIELDS(LoaderFigures, batches_per_s, data_stall_pct);
DLDOCTOR_FIELDS(ProcessFigures, cpu_pct, runq_delay_pct, getitem_ms);
DLDOCTOR_FIELDS(MachineFigures, cpu_busy_pct, shm_used_bytes, mem_available_bytes);
DLDOCTOR_FIELDS(GpuFigures, utilization_pct, memory_used_bytes, job_memory_bytes);

template <class Loader, class Value>
nb::dict loader_dict(const Loader& l, Value value) {
  nb::dict x;
  x["loader"] = int(l.loader);
  x["batches"] = l.batches;
  put_fields<LoaderFigures>(x, l, value);
  return x;
}

template <class Process, class Value>
nb::dict process_dict(const Process& p, Value value) {
  nb::dict x;
  x["role"] = p.role;
  x["loader"] = p.loader >= 0 ? nb::cast(p.loader) : nb::none();
  x["worker"] = p.worker >= 0 ? nb::cast(p.worker) : nb::none();
  x["batches"] = p.batches;
  put_fields<ProcessFigures>(x, p, value);
  return x;
}

template <class Machine, class Value>
nb::dict machine_dict(const Machine& m, Value value) {
  nb::dict x = to_dict<MachineFigures>(m, value);
  x["shm_total_bytes"] = opt(m.shm_total_bytes);
  return x;
}

template <class Gpu, class Value>
nb::dict gpu_dict(const Gpu& g, Value value) {
  nb::dict x;
  x["index"] = g.index;
  x["job"] = g.job;
  put_fields<GpuFigures>(x, g, value);
  x["memory_total_bytes"] = opt(g.memory_total_bytes);
  return x;
}

nb::dict series_to_dict(const monitor::SeriesData& d) {
  const auto value = [](const std::vector<std::optional<double>>& v) { return opt_list(v); };
  nb::dict out;
  out["t0_ns"] = d.t0_ns;
  out["interval_s"] = double(d.width_ns) / 1e9;
  nb::list t;
  for (double x : d.t_s) t.append(x);
  out["t_s"] = t;
  out["loaders"] = list_of(d.loaders, [&](const auto& l) { return loader_dict(l, value); });
  out["processes"] = list_of(d.processes, [&](const monitor::ProcessSeries& p) {
    nb::dict x = process_dict(p, value);
    nb::list pids;
    for (int pid : p.pids) pids.append(pid);
    x["pids"] = pids;
    x["collate_ms"] = opt_list(p.collate_ms);
    x["state"] = p.state;
    x["getitem_ms_sample"] = float_list(p.getitem_ms_sample);
    x["collate_ms_sample"] = float_list(p.collate_ms_sample);
    return x;
  });
  nb::dict m = machine_dict(d.machine, value);
  m["read_mb_per_s"] = opt_list(d.machine.read_mb_per_s);
  m["rchar_mb_per_s"] = opt_list(d.machine.rchar_mb_per_s);
  out["machine"] = m;
  out["processes_cut"] = d.processes_cut;
  out["gpus"] = list_of(d.gpus, [&](const auto& g) { return gpu_dict(g, value); });
  out["gpu_not_measured"] = d.gpu_not_measured;
  return out;
}

nb::dict live_to_dict(const monitor::LiveData& d) {
  const auto value = [](const auto& v) { return opt(v); };
  nb::dict out;
  out["t_ns"] = d.t_ns;
  out["window_s"] = d.window_s;
  out["loaders"] = list_of(d.loaders, [&](const monitor::LiveData::Loader& l) {
    nb::dict x = loader_dict(l, value);
    x["num_workers"] = l.num_workers;
    return x;
  });
  out["processes"] = list_of(d.processes, [&](const monitor::LiveData::Process& p) {
    nb::dict x = process_dict(p, value);
    x["pid"] = p.pid;
    x["state"] = std::string(1, p.state);
    return x;
  });
  out["machine"] = machine_dict(d, value);
  out["gpus"] = list_of(d.gpus, [&](const auto& g) { return gpu_dict(g, value); });
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
