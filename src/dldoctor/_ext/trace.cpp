// Glue for dldoctor_core/trace: the EventRing class (the watcher's reader side) and a
// per-process writer used by the job hooks on every batch, which must stay well under 1 µs.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/trace/batch_sampler.hpp"
#include "dldoctor_core/trace/ring.hpp"
#include "event_glue.hpp"
#include "register.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace dldoctor::ext {

using trace::Event;
using trace::EventKind;
using trace::EventRing;

Event make_event(int64_t kind, int64_t loader, int64_t worker, int64_t index, int64_t count,
                 int64_t t_ns, int64_t v0, int64_t v1, int64_t v2, int64_t v3, int64_t flags,
                 int64_t weight, uint32_t pid) noexcept {
  Event e;
  e.kind = static_cast<EventKind>(kind);
  e.pid = pid;
  e.t_ns = t_ns != 0 ? t_ns : now_ns();
  e.flags = static_cast<uint8_t>(flags);
  e.loader = static_cast<uint16_t>(loader);
  e.worker = static_cast<int16_t>(worker);
  e.index = static_cast<int32_t>(index);
  e.count = static_cast<uint32_t>(count);
  e.weight = static_cast<uint16_t>(std::clamp<int64_t>(weight, 0, trace::kMaxWeight));
  e.v[0] = v0;
  e.v[1] = v1;
  e.v[2] = v2;
  e.v[3] = v3;
  return e;
}

nb::tuple event_to_tuple(const Event& e) {
  return nb::make_tuple(static_cast<int>(e.kind), e.pid, e.t_ns, int(e.flags), int(e.loader),
                        int(e.worker), e.index, e.count, e.v[0], e.v[1], e.v[2], e.v[3],
                        int(e.weight));
}

namespace {

template <size_t N>
nb::dict names_of(const trace::VocabularyEntry (&table)[N]) {
  nb::dict d;
  for (const auto& entry : table) d[entry.name] = entry.value;
  return d;
}

// The reader side, held by the watcher (and by tests). close() unmaps early.
class PyRing {
 public:
  explicit PyRing(EventRing ring) : ring_(std::move(ring)) {}

  EventRing& get() {
    if (!ring_) throw Error("event ring is closed");
    return *ring_;
  }
  void close() { ring_.reset(); }
  bool closed() const { return !ring_; }

 private:
  std::optional<EventRing> ring_;
};

// This process's writer. Never freed: the mapping must outlive every thread that may still
// emit while the interpreter shuts down; the kernel unmaps it at exit.
EventRing* g_writer = nullptr;
// getpid() is a syscall (~150 ns here); cache it and refresh it in forked children.
std::atomic<uint32_t> g_pid{0};

void refresh_pid() noexcept {
  g_pid.store(static_cast<uint32_t>(::getpid()), std::memory_order_relaxed);
}

bool writer_open(const std::string& path) {
  if (g_writer != nullptr && g_writer->path() == path) return true;
  auto* ring = new EventRing(EventRing::open(path));  // throws Error: one line
  delete g_writer;                                    // callers hold the GIL, as every emitter does
  g_writer = ring;
  refresh_pid();
  return true;
}

}  // namespace

bool writer_active() noexcept { return g_writer != nullptr; }

bool writer_emit(int64_t kind, int64_t loader, int64_t worker, int64_t index, int64_t count,
                 int64_t t_ns, int64_t v0, int64_t v1, int64_t v2, int64_t v3, int64_t flags,
                 int64_t weight) noexcept {
  EventRing* ring = g_writer;
  if (ring == nullptr) return false;
  return ring->emit(make_event(kind, loader, worker, index, count, t_ns, v0, v1, v2, v3, flags,
                               weight, g_pid.load(std::memory_order_relaxed)));
}

bool writer_claim_profile(int loader, int64_t first_spacing_ns, int64_t max_spacing_ns) noexcept {
  EventRing* ring = g_writer;
  return ring != nullptr && loader > 0 &&
         ring->claim_profile(static_cast<uint16_t>(loader), now_ns(), first_spacing_ns,
                             max_spacing_ns);
}

void writer_progress(int loader, long long epoch, long long next_index) noexcept {
  if (EventRing* ring = g_writer; ring != nullptr && next_index >= 0)
    ring->note_progress(static_cast<uint16_t>(loader), epoch, next_index);
}

void register_trace(nb::module_& m) {
  refresh_pid();
  ::pthread_atfork(nullptr, nullptr, refresh_pid);

  nb::class_<PyRing>(m, "EventRing", "The shared-memory event ring (many writers, one reader).")
      .def_static(
          "create",
          [](const std::string& path, size_t capacity) {
            return new PyRing(EventRing::create(path, capacity));
          },
          "path"_a, "capacity"_a = trace::kDefaultRingCapacity, nb::rv_policy::take_ownership,
          "Create the ring file at path (it must not exist) with capacity slots.")
      .def_static(
          "open", [](const std::string& path) { return new PyRing(EventRing::open(path)); },
          "path"_a, nb::rv_policy::take_ownership, "Map an existing ring file.")
      .def(
          "drain",
          [](PyRing& self, size_t max) {
            EventRing& ring = self.get();
            std::vector<Event> events;
            {
              nb::gil_scoped_release unlocked;
              ring.drain(events, max);
            }
            nb::list out;
            for (const Event& e : events) out.append(event_to_tuple(e));
            return out;
          },
          "max"_a = 0,
          "Committed events in order, as tuples (kind, pid, t_ns, flags, loader, worker, index, "
          "count, v0, v1, v2, v3, weight); max=0 takes all.")
      .def(
          "emit",
          [](PyRing& self, int64_t kind, int64_t loader, int64_t worker, int64_t index,
             int64_t count, int64_t t_ns, int64_t v0, int64_t v1, int64_t v2, int64_t v3,
             int64_t flags, int64_t weight) {
            return self.get().emit(make_event(kind, loader, worker, index, count, t_ns, v0, v1, v2,
                                              v3, flags, weight, g_pid.load()));
          },
          "kind"_a, "loader"_a = 0, "worker"_a = -1, "index"_a = -1, "count"_a = 0, "t_ns"_a = 0,
          "v0"_a = 0, "v1"_a = 0, "v2"_a = 0, "v3"_a = 0, "flags"_a = 0, "weight"_a = 0,
          "Append one event through this mapping (t_ns=0: now). False when full.")
      .def("next_loader_id", [](PyRing& self) { return self.get().next_loader_id(); })
      .def(
          "progress",
          [](PyRing& self, uint16_t loader, int64_t epoch) {
            return self.get().progress(loader, epoch);
          },
          "loader"_a, "epoch"_a,
          "The next batch loader's main process will hand out in epoch (noted at each "
          "hand-out, measured or not); -1 when none was noted.")
      .def(
          "set_stall_timeout",
          [](PyRing& self, double seconds) {
            self.get().set_stall_timeout(std::chrono::nanoseconds(int64_t(seconds * 1e9)));
          },
          "seconds"_a, "How long to wait for a reserved slot before skipping it as lost.")
      .def_prop_ro("dropped", [](PyRing& self) { return self.get().dropped(); })
      .def_prop_ro("lost", [](PyRing& self) { return self.get().lost(); })
      .def_prop_ro("pending", [](PyRing& self) { return self.get().pending(); })
      .def_prop_ro("capacity", [](PyRing& self) { return self.get().capacity(); })
      .def_prop_ro("path", [](PyRing& self) { return self.get().path(); })
      .def_prop_ro("watcher_pid", [](PyRing& self) { return self.get().watcher_pid(); })
      .def_prop_ro("closed", &PyRing::closed)
      .def("close", &PyRing::close, "Unmap the ring now (the file stays).")
      .def(
          "__enter__", [](PyRing& self) -> PyRing& { return self; }, nb::rv_policy::reference)
      .def("__exit__", [](PyRing& self, nb::args) { self.close(); });

  m.def("trace_open", &writer_open, "path"_a,
        "Open the ring this process writes to (once per process; forked children inherit it). "
        "Raises CoreError with one line when the file is not a usable ring.");
  m.def("trace_emit", &writer_emit, "kind"_a, "loader"_a, "worker"_a, "index"_a, "count"_a,
        "t_ns"_a, "v0"_a = 0, "v1"_a = 0, "v2"_a = 0, "v3"_a = 0, "flags"_a = 0, "weight"_a = 0,
        "Record one event from this process (t_ns=0: now). False when no ring is open or it is "
        "full; never raises.");
  m.def(
      "trace_vocabulary",
      []() {
        nb::dict d;
        d["kind"] = names_of(trace::kEventKindNames);
        d["loader_flag"] = names_of(trace::kLoaderFlagNames);
        d["batch_flag"] = names_of(trace::kBatchFlagNames);
        d["start_method"] = names_of(trace::kStartMethodNames);
        d["iter_end_reason"] = names_of(trace::kIterEndReasonNames);
        nb::list fields;
        for (const char* f : kEventFields) fields.append(f);
        d["event_fields"] = nb::tuple(fields);
        return d;
      },
      "The event vocabulary of trace/event.hpp, its one definition: {'kind': {name: value}, "
      "'loader_flag', 'batch_flag', 'start_method', 'iter_end_reason'}, and 'event_fields', "
      "the names of an event tuple's fields.");
  m.def(
      "trace_next_loader_id",
      []() -> int { return g_writer != nullptr ? g_writer->next_loader_id() : 0; },
      "A loader id unique across the job's processes; 0 when no ring is open.");
  m.def("trace_active", []() { return g_writer != nullptr; });
  m.def("trace_path", []() -> std::string { return g_writer != nullptr ? g_writer->path() : ""; });
  m.def(
      "trace_pid", []() { return g_pid.load(); }, "The pid events from this process carry.");
  m.def(
      "trace_close",
      []() {
        delete g_writer;
        g_writer = nullptr;
      },
      "Stop writing (tests and uninstall).");
  m.def("monotonic_ns", &now_ns, "CLOCK_MONOTONIC in ns (the clock of every event).");
  m.def("thread_cpu_ns", &thread_cpu_ns, "CPU time of the calling thread in ns.");
}

}  // namespace dldoctor::ext
