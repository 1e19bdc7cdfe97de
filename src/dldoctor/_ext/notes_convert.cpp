// Dicts from the side logs to the analyzer's notes; see notes_convert.hpp.
#include "notes_convert.hpp"

#include <string>

#include "optional.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {

namespace {

analyze::ErrorSource source_from(const std::string& s) {
  if (s == "queue_feeder") return analyze::ErrorSource::kQueueFeeder;
  if (s == "loader") return analyze::ErrorSource::kLoader;
  if (s == "uncaught") return analyze::ErrorSource::kUncaught;
  if (s == "worker" || s.empty()) return analyze::ErrorSource::kWorker;
  throw Error("failure note: unknown error source '" + s + "'");
}

/// The process a note is about: its loader, worker id and pid.
template <typename Note>
void read_process(Note& x, nb::handle d, int loader, const char* w) {
  x.loader = loader;
  x.worker = read<int>(d, "worker", w).value_or(-1);
  x.pid = read<int>(d, "pid", w).value_or(0);
}

}  // namespace

analyze::FailureNote failure_note_from_dict(nb::handle d) {
  require_dict(d, "a failure note");
  const char* w = "failure note";
  const std::string kind = read_str(d, "kind", w);
  const int64_t t = read<int64_t>(d, "t_ns", w).value_or(0);
  const int loader = read<int>(d, "loader", w).value_or(-1);
  if (kind == "death") {
    analyze::WorkerDeath x;
    read_process(x, d, loader, w);
    x.exit_code = read<int>(d, "exit_code", w);
    x.signal = read<int>(d, "signal", w);
    if (x.signal && *x.signal <= 0) x.signal.reset();
    x.message = read_str(d, "message", w);
    x.stderr_tail = read_str(d, "stderr_tail", w);
    x.cgroup_oom_kills = read<int64_t>(d, "cgroup_oom_kills", w);
    x.machine_oom_kills = read<int64_t>(d, "machine_oom_kills", w);
    x.cgroup_limit_bytes = read<int64_t>(d, "cgroup_limit_bytes", w);
    x.cgroup_usage_bytes = read<int64_t>(d, "cgroup_usage_bytes", w);
    x.cgroup_peak_bytes = read<int64_t>(d, "cgroup_peak_bytes", w);
    x.t_ns = t;
    return x;
  }
  if (kind == "error") {
    analyze::ErrorNote x;
    x.source = source_from(read_str(d, "source", w));
    read_process(x, d, loader, w);
    x.type = read_str(d, "type", w);
    x.message = read_str(d, "message", w);
    if (x.message.size() > 4096) x.message.resize(4096);
    x.cuda_peak_bytes = read<int64_t>(d, "cuda_peak_bytes", w);
    x.cuda_total_bytes = read<int64_t>(d, "cuda_total_bytes", w);
    x.index = read<int>(d, "index", w).value_or(-1);
    x.epoch = read<int64_t>(d, "epoch", w).value_or(0);
    for (nb::handle s : read_list(d, "samples", w, Bad::kUnknown))
      if (auto i = as<int64_t>(s, w, "samples", Bad::kUnknown);
          i && x.samples.size() < x.kMaxSamples)
        x.samples.push_back(*i);
    x.traceback = read_str(d, "traceback", w);
    if (x.traceback.size() > x.kMaxTraceback)
      x.traceback.erase(0, x.traceback.size() - x.kMaxTraceback);  // the newest frames
    x.t_ns = t;
    return x;
  }
  if (kind == "runtime") {
    analyze::RuntimeNote x;
    x.loader = loader;
    x.pid = read<int>(d, "pid", w).value_or(0);
    x.sharing_strategy = read_str(d, "sharing_strategy", w);
    x.nofile_soft = read<int64_t>(d, "nofile_soft", w);
    x.nofile_hard = read<int64_t>(d, "nofile_hard", w);
    x.nofile_unlimited = read<bool>(d, "nofile_unlimited", w).value_or(false);
    x.pin_memory_requested = read<bool>(d, "pin_memory_requested", w);
    x.accelerator = read<bool>(d, "accelerator", w);
    x.process_only = read<bool>(d, "process_only", w).value_or(false);
    x.t_ns = t;
    return x;
  }
  if (kind == "cgroup_memory") {
    analyze::CgroupMemoryNote x;
    x.limit_bytes = read<int64_t>(d, "limit_bytes", w);
    x.usage_bytes = read<int64_t>(d, "usage_bytes", w);
    x.peak_bytes = read<int64_t>(d, "peak_bytes", w);
    x.t_ns = t;
    return x;
  }
  if (kind == "cuda_memory") {
    analyze::CudaMemoryNote x;
    x.loader = loader;
    x.device = read<int>(d, "device", w).value_or(0);
    x.batch_size = read<int>(d, "batch_size", w);
    x.peak_bytes = read<int64_t>(d, "peak_bytes", w).value_or(0);
    x.allocated_bytes = read<int64_t>(d, "allocated_bytes", w);
    x.reserved_bytes = read<int64_t>(d, "reserved_bytes", w);
    x.total_bytes = read<int64_t>(d, "total_bytes", w);
    x.t_ns = t;
    return x;
  }
  throw Error("failure note: unknown kind '" + kind + "'");
}

analyze::DatasetNotes dataset_notes_from_dict(nb::handle d) {
  const char* w = "dataset note";
  const Bad lenient = Bad::kUnknown;
  analyze::DatasetNotes n;
  n.type = read_str(d, "dataset_type", w, lenient);
  n.length = read<int64_t>(d, "length", w, lenient);
  n.pickled_bytes = read<int64_t>(d, "pickled_bytes", w, lenient);
  n.pickle_ms = read<double>(d, "pickle_ms", w, lenient);
  n.pickle_complete = read<bool>(d, "pickle_complete", w, lenient).value_or(true);
  n.shared_tensor_bytes = read<int64_t>(d, "shared_tensor_bytes", w, lenient);
  for (nb::handle a : read_list(d, "attrs", w, lenient)) {
    if (!nb::isinstance<nb::dict>(a)) continue;
    analyze::DatasetAttr x;
    x.name = read_str(a, "name", w, lenient);
    x.type = read_str(a, "type", w, lenient);
    x.elements = read<int64_t>(a, "elements", w, lenient);
    x.bytes = read<int64_t>(a, "bytes", w, lenient);
    x.element_type = read_str(a, "element_type", w, lenient);
    x.python_objects = read<bool>(a, "python_objects", w, lenient).value_or(false);
    if (!x.name.empty() && n.attrs.size() < 64) n.attrs.push_back(std::move(x));
  }
  return n;
}

analyze::SlowBatchNote slow_batch_from_dict(nb::handle d) {
  const char* w = "slow batch note";
  const Bad lenient = Bad::kUnknown;
  analyze::SlowBatchNote n;
  n.pid = read<int>(d, "pid", w, lenient).value_or(0);
  n.worker = read<int>(d, "worker", w, lenient).value_or(-1);
  n.index = read<int>(d, "index", w, lenient).value_or(-1);
  n.fetch_ns = read<int64_t>(d, "fetch_ns", w, lenient).value_or(0);
  for (nb::handle s : read_list(d, "samples", w, lenient))
    if (auto i = as<int64_t>(s, w, "samples", lenient); i && n.samples.size() < 64)
      n.samples.push_back(*i);
  return n;
}

}  // namespace dldoctor::ext
