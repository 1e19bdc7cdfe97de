// Glue: failure notes from dicts (see failure_convert.hpp).
#include "failure_convert.hpp"

#include <nanobind/stl/string.h>

#include <cmath>
#include <string>

#include "dldoctor_core/common/error.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {

namespace {

nb::object field(nb::handle d, const char* key) {
  if (!d.is_valid() || d.is_none() || !nb::isinstance<nb::dict>(d)) return nb::none();
  nb::dict dd = nb::borrow<nb::dict>(d);
  if (!dd.contains(key)) return nb::none();
  return dd[key];
}

std::string py_type(nb::handle v) { return nb::cast<std::string>(nb::type_name(v.type())); }

std::optional<int64_t> opt_int(nb::handle d, const char* key) {
  nb::object v = field(d, key);
  if (v.is_none()) return std::nullopt;
  bool b;
  if (nb::isinstance<nb::bool_>(v) && nb::try_cast(v, b)) return int64_t(b);
  int64_t x;
  if (nb::try_cast(v, x)) return x;
  double f;
  if (nb::try_cast(v, f) && std::isfinite(f)) return int64_t(f);
  throw Error(std::string("failure note field '") + key + "' must be an integer or None, got " +
              py_type(v));
}

std::optional<int> opt_int32(nb::handle d, const char* key) {
  auto v = opt_int(d, key);
  return v ? std::optional<int>(int(*v)) : std::nullopt;
}

std::optional<bool> opt_bool(nb::handle d, const char* key) {
  auto v = opt_int(d, key);
  return v ? std::optional<bool>(*v != 0) : std::nullopt;
}

std::string opt_str(nb::handle d, const char* key) {
  nb::object v = field(d, key);
  if (v.is_none()) return {};
  std::string s;
  if (nb::try_cast(v, s)) return s;
  return nb::cast<std::string>(nb::str(v));
}

analyze::ErrorSource source_from(const std::string& s) {
  if (s == "queue_feeder") return analyze::ErrorSource::kQueueFeeder;
  if (s == "loader") return analyze::ErrorSource::kLoader;
  if (s == "uncaught") return analyze::ErrorSource::kUncaught;
  if (s == "worker" || s.empty()) return analyze::ErrorSource::kWorker;
  throw Error("failure note: unknown error source '" + s + "'");
}

}  // namespace

analyze::FailureNote failure_note_from_dict(nb::handle d) {
  if (!nb::isinstance<nb::dict>(d))
    throw Error("a failure note must be a dict, got " + py_type(d));
  const std::string kind = opt_str(d, "kind");
  const int64_t t = opt_int(d, "t_ns").value_or(0);
  const int loader = opt_int32(d, "loader").value_or(-1);
  if (kind == "death") {
    analyze::WorkerDeath x;
    x.loader = loader;
    x.worker = opt_int32(d, "worker").value_or(-1);
    x.pid = opt_int32(d, "pid").value_or(0);
    x.exit_code = opt_int32(d, "exit_code");
    x.signal = opt_int32(d, "signal");
    if (x.signal && *x.signal <= 0) x.signal.reset();
    x.message = opt_str(d, "message");
    x.stderr_tail = opt_str(d, "stderr_tail");
    x.cgroup_oom_kills = opt_int(d, "cgroup_oom_kills");
    x.machine_oom_kills = opt_int(d, "machine_oom_kills");
    x.cgroup_limit_bytes = opt_int(d, "cgroup_limit_bytes");
    x.cgroup_usage_bytes = opt_int(d, "cgroup_usage_bytes");
    x.cgroup_peak_bytes = opt_int(d, "cgroup_peak_bytes");
    x.t_ns = t;
    return x;
  }
  if (kind == "error") {
    analyze::ErrorNote x;
    x.source = source_from(opt_str(d, "source"));
    x.loader = loader;
    x.worker = opt_int32(d, "worker").value_or(-1);
    x.pid = opt_int32(d, "pid").value_or(0);
    x.type = opt_str(d, "type");
    x.message = opt_str(d, "message");
    if (x.message.size() > 4096) x.message.resize(4096);
    x.cuda_peak_bytes = opt_int(d, "cuda_peak_bytes");
    x.cuda_total_bytes = opt_int(d, "cuda_total_bytes");
    x.t_ns = t;
    return x;
  }
  if (kind == "runtime") {
    analyze::RuntimeNote x;
    x.loader = loader;
    x.pid = opt_int32(d, "pid").value_or(0);
    x.sharing_strategy = opt_str(d, "sharing_strategy");
    x.nofile_soft = opt_int(d, "nofile_soft");
    x.nofile_hard = opt_int(d, "nofile_hard");
    x.nofile_unlimited = opt_bool(d, "nofile_unlimited").value_or(false);
    x.pin_memory_requested = opt_bool(d, "pin_memory_requested");
    x.accelerator = opt_bool(d, "accelerator");
    x.t_ns = t;
    return x;
  }
  if (kind == "cgroup_memory") {
    analyze::CgroupMemoryNote x;
    x.limit_bytes = opt_int(d, "limit_bytes");
    x.usage_bytes = opt_int(d, "usage_bytes");
    x.peak_bytes = opt_int(d, "peak_bytes");
    x.t_ns = t;
    return x;
  }
  if (kind == "cuda_memory") {
    analyze::CudaMemoryNote x;
    x.loader = loader;
    x.device = opt_int32(d, "device").value_or(0);
    x.batch_size = opt_int32(d, "batch_size");
    x.peak_bytes = opt_int(d, "peak_bytes").value_or(0);
    x.allocated_bytes = opt_int(d, "allocated_bytes");
    x.reserved_bytes = opt_int(d, "reserved_bytes");
    x.total_bytes = opt_int(d, "total_bytes");
    x.t_ns = t;
    return x;
  }
  throw Error("failure note: unknown kind '" + kind + "'");
}

}  // namespace dldoctor::ext
