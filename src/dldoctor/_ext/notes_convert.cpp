// Dicts from the side logs to the analyzer's notes; see notes_convert.hpp.
#include "notes_convert.hpp"

#include <string>

#include "fields.hpp"
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

// The plain fields of each kind of note, in the order they are read (failure_log.hpp's
// defaults where a key is missing).
DLDOCTOR_FIELDS(NoteProcessFields, worker, pid);  // the process a note is about
DLDOCTOR_FIELDS(DeathFields, exit_code, signal, message, stderr_tail, cgroup_oom_kills,
                machine_oom_kills, cgroup_limit_bytes, cgroup_usage_bytes, cgroup_peak_bytes);
DLDOCTOR_FIELDS(ErrorFields, type, message, cuda_peak_bytes, cuda_total_bytes, index, epoch);
DLDOCTOR_FIELDS(RuntimeFields, pid, sharing_strategy, nofile_soft, nofile_hard, nofile_unlimited,
                pin_memory_requested, accelerator, process_only);
DLDOCTOR_FIELDS(CgroupMemoryFields, limit_bytes, usage_bytes, peak_bytes);
DLDOCTOR_FIELDS(CudaMemoryFields, device, batch_size, peak_bytes, allocated_bytes,
                reserved_bytes, total_bytes);
DLDOCTOR_FIELDS(DatasetFields, length, pickled_bytes, pickle_ms, pickle_complete,
                shared_tensor_bytes);
DLDOCTOR_FIELDS(DatasetAttrFields, name, type, elements, bytes, element_type, python_objects);
DLDOCTOR_FIELDS(SlowBatchFields, pid, worker, index, fetch_ns);

/// The process a note is about: its loader, worker id and pid.
template <typename Note>
void read_process(Note& x, nb::handle d, int loader, const char* w) {
  x.loader = loader;
  get_fields<NoteProcessFields>(x, d, w);
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
    get_fields<DeathFields>(x, d, w);
    if (x.signal && *x.signal <= 0) x.signal.reset();
    x.t_ns = t;
    return x;
  }
  if (kind == "error") {
    analyze::ErrorNote x;
    x.source = source_from(read_str(d, "source", w));
    read_process(x, d, loader, w);
    get_fields<ErrorFields>(x, d, w);
    if (x.message.size() > 4096) x.message.resize(4096);
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
    get_fields<RuntimeFields>(x, d, w);
    x.t_ns = t;
    return x;
  }
  if (kind == "cgroup_memory") {
    auto x = from_dict<analyze::CgroupMemoryNote, CgroupMemoryFields>(d, w);
    x.t_ns = t;
    return x;
  }
  if (kind == "cuda_memory") {
    analyze::CudaMemoryNote x;
    x.loader = loader;
    get_fields<CudaMemoryFields>(x, d, w);
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
  get_fields<DatasetFields>(n, d, w, lenient);
  for (nb::handle a : read_list(d, "attrs", w, lenient)) {
    if (!nb::isinstance<nb::dict>(a)) continue;
    auto x = from_dict<analyze::DatasetAttr, DatasetAttrFields>(a, w, lenient);
    if (!x.name.empty() && n.attrs.size() < 64) n.attrs.push_back(std::move(x));
  }
  return n;
}

analyze::SlowBatchNote slow_batch_from_dict(nb::handle d) {
  const char* w = "slow batch note";
  const Bad lenient = Bad::kUnknown;
  auto n = from_dict<analyze::SlowBatchNote, SlowBatchFields>(d, w, lenient);
  for (nb::handle s : read_list(d, "samples", w, lenient))
    if (auto i = as<int64_t>(s, w, "samples", lenient); i && n.samples.size() < 64)
      n.samples.push_back(*i);
  return n;
}

}  // namespace dldoctor::ext
