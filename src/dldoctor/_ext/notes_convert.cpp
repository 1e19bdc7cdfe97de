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
DLDOCTOR_FIELDS(DeathFields, worker, pid, exit_code, signal, message, stderr_tail,
                cgroup_oom_kills, machine_oom_kills, cgroup_limit_bytes, cgroup_usage_bytes,
                cgroup_peak_bytes);
DLDOCTOR_FIELDS(ErrorFields, worker, pid, type, message, cuda_peak_bytes, cuda_total_bytes, index,
                epoch);
DLDOCTOR_FIELDS(RuntimeFields, pid, sharing_strategy, nofile_soft, nofile_hard, nofile_unlimited,
                pin_memory_requested, accelerator, process_only);
DLDOCTOR_FIELDS(CgroupMemoryFields, limit_bytes, usage_bytes, peak_bytes);
DLDOCTOR_FIELDS(CudaMemoryFields, device, batch_size, peak_bytes, allocated_bytes,
                reserved_bytes, total_bytes);
DLDOCTOR_FIELDS(DatasetFields, length, pickled_bytes, pickle_ms, pickle_complete,
                shared_tensor_bytes);
DLDOCTOR_FIELDS(DatasetAttrFields, name, type, elements, bytes, element_type, python_objects);
DLDOCTOR_FIELDS(SlowBatchFields, pid, worker, index, fetch_ns);

/// A Note of Table's fields, with the note's loader (where the kind has one) and time.
template <typename Note, typename Table>
Note note_from(nb::handle d, int loader, int64_t t_ns, const char* w) {
  Note x;
  if constexpr (requires { x.loader; }) x.loader = loader;
  get_fields<Table>(x, d, w);
  x.t_ns = t_ns;
  return x;
}

}  // namespace

analyze::FailureNote failure_note_from_dict(nb::handle d) {
  require_dict(d, "a failure note");
  const char* w = "failure note";
  const std::string kind = read_str(d, "kind", w);
  const int64_t t = read<int64_t>(d, "t_ns", w).value_or(0);
  const int loader = read<int>(d, "loader", w).value_or(-1);
  if (kind == "death") {
    auto x = note_from<analyze::WorkerDeath, DeathFields>(d, loader, t, w);
    if (x.signal && *x.signal <= 0) x.signal.reset();
    return x;
  }
  if (kind == "error") {
    const analyze::ErrorSource source = source_from(read_str(d, "source", w));
    auto x = note_from<analyze::ErrorNote, ErrorFields>(d, loader, t, w);
    x.source = source;
    if (x.message.size() > 4096) x.message.resize(4096);
    for (nb::handle s : read_list(d, "samples", w, Bad::kUnknown))
      if (auto i = as<int64_t>(s, w, "samples", Bad::kUnknown);
          i && x.samples.size() < x.kMaxSamples)
        x.samples.push_back(*i);
    x.traceback = read_str(d, "traceback", w);
    if (x.traceback.size() > x.kMaxTraceback)
      x.traceback.erase(0, x.traceback.size() - x.kMaxTraceback);  // the newest frames
    return x;
  }
  if (kind == "runtime") return note_from<analyze::RuntimeNote, RuntimeFields>(d, loader, t, w);
  if (kind == "cgroup_memory")
    return note_from<analyze::CgroupMemoryNote, CgroupMemoryFields>(d, loader, t, w);
  if (kind == "cuda_memory")
    return note_from<analyze::CudaMemoryNote, CudaMemoryFields>(d, loader, t, w);
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
