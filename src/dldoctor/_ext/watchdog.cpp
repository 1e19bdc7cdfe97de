// Glue for dldoctor_core/watchdog: the faulthandler parser, the /proc probe, stack capture,
// the hang classifier over dict-shaped captures, and the Watchdog thread with a Python probe.
// Dicts in and out use the field names of hang.hpp; unknown values are None. Every wait
// (stack capture, stopping the thread) runs with the GIL released.
#include "dldoctor_core/watchdog/watchdog.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "analyze_convert.hpp"
#include "dldoctor_core/analyze/rules.hpp"
#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/watchdog/proc_probe.hpp"
#include "dldoctor_core/watchdog/stack.hpp"
#include "fields.hpp"
#include "optional.hpp"
#include "register.hpp"
#include "watchdog_convert.hpp"

namespace nb = nanobind;
using namespace nb::literals;

namespace dldoctor::ext {
namespace {

namespace wd = dldoctor::watchdog;

// ---- C++ -> Python ------------------------------------------------------------------------

nb::object str_or_none(const std::string& s) {
  if (s.empty()) return nb::none();
  return nb::str(s.c_str(), s.size());
}

/// A field out: an unknown ("") string is None; see fields.hpp for the rest.
struct HangValue {
  template <typename T>
  nb::object operator()(const T& v) const {
    if constexpr (std::is_same_v<T, std::string>)
      return str_or_none(v);
    else
      return PlainValue{}(v);
  }
};

// The fields of hang.hpp's records, out (with HangValue) and in alike where both are listed.
DLDOCTOR_FIELDS(FrameFields, file, line, function, code);
DLDOCTOR_FIELDS(StackFields, thread_id, current, no_python_frame, elided, truncated);
DLDOCTOR_FIELDS(ThreadProbeFields, tid, name, state, wchan, syscall);
DLDOCTOR_FIELDS(ProbeFields, pid, gone, state, comm, wchan, syscall, syscall_nr, cpu_ns,
                num_threads, exit_code, exit_signal);
/// A capture's: its pid comes first and is required; stacks and raw_stack stand between these.
DLDOCTOR_FIELDS(CaptureWhereFields, loader, worker, state, wchan, syscall, cpu_ns_since_stall,
                cpu_window_s);
DLDOCTOR_FIELDS(CaptureEndFields, stack_note, gone, exit_code, exit_signal, io_target);
DLDOCTOR_FIELDS(HangSnapshotFields, t_ns, stalled_s, timeout_s);

nb::dict frame_dict(const wd::PyFrame& f) { return to_dict<FrameFields>(f, HangValue{}); }

nb::list threads_list(const std::vector<wd::PyThreadStack>& stacks) {
  return list_of(stacks, [](const wd::PyThreadStack& t) {
    nb::dict d = to_dict<StackFields>(t, HangValue{});
    d["frames"] = list_of(t.frames, frame_dict);
    return d;
  });
}

nb::list thread_probes(const std::vector<wd::ThreadProbe>& threads) {
  return list_of(threads, [](const wd::ThreadProbe& t) {
    return to_dict<ThreadProbeFields>(t, HangValue{});
  });
}

nb::dict probe_dict(const wd::ProcessProbe& p) {
  nb::dict d = to_dict<ProbeFields>(p, HangValue{});
  d["threads"] = thread_probes(p.threads);
  return d;
}

nb::dict capture_dict(const wd::ProcessCapture& p) {
  nb::dict d;
  d["pid"] = p.pid;
  put_fields<CaptureWhereFields>(d, p, HangValue{});
  d["stacks"] = threads_list(p.stacks);
  d["raw_stack"] = p.raw_stack;  // verbatim, "" too
  put_fields<CaptureEndFields>(d, p, HangValue{});
  d["threads"] = thread_probes(p.threads);
  return d;
}

nb::dict snapshot_dict(const wd::HangSnapshot& s) {
  nb::dict d = to_dict<HangSnapshotFields>(s);
  d["processes"] = list_of(s.processes, capture_dict);
  return d;
}

// The same finding dicts as the analyzer's (loader None when the finding is about the job).
nb::list findings_list(const std::vector<report::Finding>& findings) {
  return findings_to_list(findings);
}

// ---- Python -> C++ (bad shapes become one-line CoreErrors) ----------------------------------

std::vector<wd::PyThreadStack> stacks_from(nb::handle list, const std::string& where) {
  std::vector<wd::PyThreadStack> out;
  for (nb::handle t : nb::list(list)) {
    require_dict(t, where + " stack");
    auto s = from_dict<wd::PyThreadStack, StackFields>(t, where);
    for (nb::handle f : read_list(t, "frames", where)) {
      require_dict(f, where + " frame");
      s.frames.push_back(from_dict<wd::PyFrame, FrameFields>(f, where));
    }
    out.push_back(std::move(s));
  }
  return out;
}

/// d["pid"], which must be there.
int pid_of(nb::handle d, const std::string& where) {
  auto pid = read<int>(d, "pid", where);
  if (!pid) throw Error(where + " field 'pid' must be an integer");
  return *pid;
}

wd::ProcessCapture capture_from(nb::handle d) {
  const std::string where = "hang snapshot process";
  require_dict(d, where);
  wd::ProcessCapture p;
  p.pid = pid_of(d, where);
  get_fields<CaptureWhereFields>(p, d, where);
  p.raw_stack = read_str(d, "raw_stack", where);
  get_fields<CaptureEndFields>(p, d, where);
  if (nb::list s = read_list(d, "stacks", where); nb::len(s) > 0) {
    p.stacks = stacks_from(s, where);
  } else if (!p.raw_stack.empty()) {
    p.stacks = wd::parse_faulthandler(p.raw_stack);
    wd::annotate_source(p.stacks);
  }
  return p;
}

wd::HangSnapshot snapshot_from(nb::handle d) {
  const std::string where = "hang snapshot";
  require_dict(d, where);
  auto s = from_dict<wd::HangSnapshot, HangSnapshotFields>(d, where);
  for (nb::handle p : read_list(d, "processes", where)) s.processes.push_back(capture_from(p));
  return s;
}

/// d[key] as {worker: value}, each value read by `value`.
template <typename F>
void read_by_worker(nb::handle d, const char* key, const std::string& where, F value) {
  nb::handle o = field(d, key);
  if (!o.is_valid()) return;
  if (!nb::isinstance<nb::dict>(o)) bad_field(where, key, "a dict {worker: ...}", o);
  for (auto [k, v] : nb::borrow<nb::dict>(o)) {
    auto w = as<int>(k, where, key);
    if (!w) bad_field(where, key, "a dict {worker: ...}", o);
    value(*w, v);
  }
}

// The plain fields of a hang context's loader and of a probe result (in only).
DLDOCTOR_FIELDS(LoaderContextFields, loader, num_workers, collate_fn, worker_init_fn,
                start_method, main_threads_at_fork);
DLDOCTOR_FIELDS(LoaderWaitFields, waiting_batch, waiting_worker);
DLDOCTOR_FIELDS(WatchStateFields, loader_active, waiting, last_batch_ns, active_since_ns);
DLDOCTOR_FIELDS(WatchedProcessFields, loader, worker, exit_code, exit_signal);

wd::HangContext context_from(nb::handle d) {
  const std::string where = "hang context";
  wd::HangContext c;
  if (!d.is_valid() || d.is_none()) return c;
  require_dict(d, where);
  for (nb::handle l : read_list(d, "loaders", where)) {
    const std::string lw = "hang context loader";
    require_dict(l, lw);
    auto x = from_dict<wd::LoaderContext, LoaderContextFields>(l, lw);
    for (nb::handle n : read_list(l, "main_thread_names_at_fork", lw))
      x.main_thread_names_at_fork.push_back(
          as<std::string>(n, lw, "main_thread_names_at_fork").value_or(""));
    get_fields<LoaderWaitFields>(x, l, lw);
    read_by_worker(l, "outstanding", lw, [&](int w, nb::handle v) {
      std::vector<int64_t>& idx = x.outstanding[w];
      for (nb::handle b : nb::list(v)) {
        auto i = as<int64_t>(b, lw, "outstanding");
        if (!i) bad_field(lw, "outstanding", "a dict {worker: [batch, ...]}", b);
        idx.push_back(*i);
      }
    });
    read_by_worker(l, "batches_returned", lw, [&](int w, nb::handle v) {
      auto n = as<int64_t>(v, lw, "batches_returned");
      if (!n) bad_field(lw, "batches_returned", "a dict {worker: count}", v);
      x.batches_returned[w] = *n;
    });
    x.timeout_s = read<double>(l, "timeout_s", lw);
    c.loaders.push_back(std::move(x));
  }
  return c;
}

wd::WatchState state_from(nb::handle d) {
  const std::string where = "watchdog probe result";
  require_dict(d, where);
  auto s = from_dict<wd::WatchState, WatchStateFields>(d, where);
  for (nb::handle p : read_list(d, "processes", where)) {
    const std::string pw = "watchdog probe process";
    require_dict(p, pw);
    wd::WatchedProcess w;
    w.pid = pid_of(p, pw);
    get_fields<WatchedProcessFields>(w, p, pw);
    s.processes.push_back(w);
  }
  s.context = context_from(field(d, "context"));
  return s;
}

// ---- the Watchdog with Python callbacks ----------------------------------------------------

class PyWatchdog;
std::mutex g_live_mu;
std::set<PyWatchdog*> g_live;  // stopped at interpreter exit (atexit), before finalization

/// The Watchdog driven by Python callables. The probe and on_hang run on the watchdog
/// thread with the GIL taken for them; a probe that raises is reported as unraisable and
/// that poll is skipped.
class PyWatchdog {
 public:
  PyWatchdog(nb::object probe, nb::object on_hang, std::string run_dir, int signal,
             std::optional<double> timeout_s, double poll_s, int stack_wait_ms,
             double min_timeout_s, double p99_factor)
      : probe_(std::move(probe)), on_hang_(std::move(on_hang)) {
    if (!PyCallable_Check(probe_.ptr())) throw Error("Watchdog: probe must be callable");
    if (!on_hang_.is_none() && !PyCallable_Check(on_hang_.ptr())) {
      throw Error("Watchdog: on_hang must be callable or None");
    }
    if (!(poll_s > 0)) throw Error("Watchdog: poll_s must be positive");
    wd::WatchdogOptions o;
    o.run_dir = std::move(run_dir);
    o.signal = signal;
    o.poll_ns = int64_t(poll_s * 1e9);
    o.stack_wait_ms = stack_wait_ms;
    o.min_timeout_s = min_timeout_s;
    o.p99_factor = p99_factor;
    // The callables live in this object only (so the GC can see and break cycles through
    // them); the thread is stopped before they are dropped.
    wd::Watchdog::Probe call_probe = [this]() -> wd::WatchState {
      nb::gil_scoped_acquire gil;
      if (!probe_.is_valid()) throw Error("watchdog: cleared");
      try {
        return state_from(probe_());
      } catch (nb::python_error& e) {
        e.discard_as_unraisable("dldoctor watchdog probe");
        throw Error("watchdog probe raised");
      }
    };
    wd::Watchdog::OnHang call_hang = [this](const wd::HangSnapshot& s,
                                            const std::vector<report::Finding>& f) {
      nb::gil_scoped_acquire gil;
      if (!on_hang_.is_valid() || on_hang_.is_none()) return;
      try {
        on_hang_(snapshot_dict(s), findings_list(f));
      } catch (nb::python_error& e) {
        e.discard_as_unraisable("dldoctor watchdog on_hang");
      }
    };
    dog_ = std::make_unique<wd::Watchdog>(o, std::move(call_probe), analyze::judge_hang,
                                          std::move(call_hang));
    if (timeout_s) dog_->set_timeout_override(*timeout_s);
    std::lock_guard lock(g_live_mu);
    g_live.insert(this);
  }

  ~PyWatchdog() {
    {
      std::lock_guard lock(g_live_mu);
      g_live.erase(this);
    }
    stop();
    dog_.reset();
  }

  void start() {
    if (!probe_.is_valid()) throw Error("Watchdog: cleared by the garbage collector");
    dog_->start();
  }

  /// Joins the thread with the GIL released: the thread may be waiting for it.
  void stop() {
    if (!dog_) return;
    if (PyGILState_Check()) {
      nb::gil_scoped_release release;
      dog_->stop();
    } else {
      dog_->stop();
    }
  }

  /// tp_clear: stop, then drop the callables.
  void clear() {
    stop();
    probe_ = nb::object();
    on_hang_ = nb::object();
  }

  wd::Watchdog& dog() { return *dog_; }
  nb::handle probe() const { return probe_; }
  nb::handle on_hang() const { return on_hang_; }

 private:
  nb::object probe_;
  nb::object on_hang_;
  std::unique_ptr<wd::Watchdog> dog_;
};

int watchdog_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(Py_TYPE(self));
  if (!nb::inst_ready(self)) return 0;
  PyWatchdog* w = nb::inst_ptr<PyWatchdog>(self);
  Py_VISIT(w->probe().ptr());
  Py_VISIT(w->on_hang().ptr());
  return 0;
}

int watchdog_clear(PyObject* self) {
  if (nb::inst_ready(self)) nb::inst_ptr<PyWatchdog>(self)->clear();
  return 0;
}

PyType_Slot watchdog_slots[] = {
    {Py_tp_traverse, (void*)watchdog_traverse}, {Py_tp_clear, (void*)watchdog_clear}, {0, nullptr}};

void stop_all_watchdogs() {
  std::vector<PyWatchdog*> live;
  {
    std::lock_guard lock(g_live_mu);
    live.assign(g_live.begin(), g_live.end());
  }
  for (PyWatchdog* w : live) w->stop();
}

}  // namespace

nb::dict hang_snapshot_to_dict(const watchdog::HangSnapshot& s) { return snapshot_dict(s); }
nb::list hang_findings_to_list(const std::vector<report::Finding>& f) { return findings_list(f); }

void register_watchdog(nb::module_& m) {
  m.def("hang_stack_signal", &wd::default_stack_signal,
        "The signal the hooks register their safe-point stack dump on "
        "(job.stackdump.STACK_SIGNAL).");
  m.def("native_stack_signal", &wd::native_stack_signal, "signal"_a,
        "The signal the hooks register faulthandler's one-thread dump on, beside `signal` "
        "(job.stackdump.STACK_SIGNAL_NATIVE).");

  m.def(
      "parse_faulthandler",
      [](const std::string& text) { return threads_list(wd::parse_faulthandler(text)); }, "text"_a,
      "Parses faulthandler's all-threads output into [{thread_id, current, no_python_frame, "
      "elided, truncated, frames: [{file, line, function, code}]}], most recent call first.");

  m.def(
      "probe_process",
      [](int pid, bool threads) {
        wd::ProcessProbe p;
        {
          nb::gil_scoped_release release;
          p = wd::probe_process(pid, threads);
        }
        return probe_dict(p);
      },
      "pid"_a, "threads"_a = true,
      "Kernel view of a process: {pid, gone, state, comm, wchan, syscall, syscall_nr, cpu_ns, "
      "num_threads, exit_code, exit_signal, threads}; unknown fields are None, a vanished pid "
      "has gone=True and state 'gone'.");

  // Both capture functions: the pids (any iterable of ints) read with the GIL, then the wait
  // without it.
  auto capture = [](nb::handle pid_list, const std::string& run_dir, int signal, int wait_ms) {
    std::vector<int> pids;
    for (nb::handle p : nb::iter(pid_list)) pids.push_back(nb::cast<int>(p));
    if (wait_ms < 0) throw Error("capture_stacks: wait_ms must be >= 0");
    nb::gil_scoped_release release;
    return wd::capture_stacks(pids, run_dir, signal, wait_ms);
  };
  m.def(
      "capture_stacks",
      [capture](nb::handle pids, const std::string& run_dir, int signal, int wait_ms) {
        nb::dict out;
        for (const wd::StackCapture& c : capture(pids, run_dir, signal, wait_ms)) {
          out[nb::int_(c.pid)] = c.text;
        }
        return out;
      },
      "pids"_a, "run_dir"_a, "signal"_a = wd::default_stack_signal(),
      "wait_ms"_a = wd::kStackWaitMs,
      "Sends `signal` to the main thread of each pid that handles it (native_stack_signal(signal) "
      "when no stack comes within 150 ms) and returns {pid: text appended to "
      "<run_dir>/stack-<pid>.txt} ('' when nothing came within wait_ms).");
  m.def(
      "capture_stacks_detail",
      [capture](nb::handle pids, const std::string& run_dir, int signal, int wait_ms) {
        nb::dict out;
        for (const wd::StackCapture& c : capture(pids, run_dir, signal, wait_ms)) {
          nb::dict d;
          d["text"] = c.text;
          d["note"] = str_or_none(c.note);
          d["gone"] = c.gone;
          d["native"] = c.native;
          out[nb::int_(c.pid)] = d;
        }
        return out;
      },
      "pids"_a, "run_dir"_a, "signal"_a = wd::default_stack_signal(),
      "wait_ms"_a = wd::kStackWaitMs,
      "As capture_stacks, with why a stack is missing and whether the native signal was sent: "
      "{pid: {text, note, gone, native}}.");

  m.def(
      "classify_hang",
      [](nb::handle snapshot, nb::handle context) {
        wd::HangSnapshot s = snapshot_from(snapshot);
        wd::HangContext c = context_from(context);
        return findings_list(analyze::classify_hang(s, c));
      },
      "snapshot"_a, "context"_a = nb::none(),
      "The hang rules over a dict-shaped HangSnapshot ({t_ns, stalled_s, timeout_s, processes: "
      "[{pid, loader, worker, state, wchan, syscall, cpu_ns_since_stall, cpu_window_s, "
      "raw_stack | stacks, gone, exit_code, exit_signal, io_target}]}) and HangContext "
      "({loaders: [{loader, num_workers, collate_fn, worker_init_fn, start_method, "
      "main_threads_at_fork, main_thread_names_at_fork, waiting_batch, waiting_worker, "
      "outstanding, batches_returned, timeout_s}]}) -> [finding dict].");

  m.def(
      "default_hang_timeout_s",
      [](std::optional<int64_t> p99_ns) { return wd::adaptive_timeout_s(p99_ns); },
      "p99_inter_batch_ns"_a = nb::none(), "max(60 s, 10 x p99 gap between batches).");

  nb::class_<PyWatchdog>(m, "Watchdog", nb::type_slots(watchdog_slots),
                         "The hang watchdog thread; `probe()` returns {loader_active, waiting, "
                         "last_batch_ns, active_since_ns, processes: [{pid, loader, worker}], "
                         "context}; `on_hang(snapshot, findings)` is called once per stall.")
      .def(nb::init<nb::object, nb::object, std::string, int, std::optional<double>, double, int,
                    double, double>(),
           "probe"_a, "on_hang"_a = nb::none(), "run_dir"_a = "",
           "signal"_a = wd::default_stack_signal(), "timeout_s"_a = nb::none(),
           "poll_s"_a = double(wd::kPollNs) / 1e9, "stack_wait_ms"_a = wd::kStackWaitMs,
           "min_timeout_s"_a = wd::kMinHangTimeoutS, "p99_factor"_a = wd::kHangTimeoutP99Factor)
      .def("start", &PyWatchdog::start)
      .def("stop", &PyWatchdog::stop)
      .def_prop_ro("running", [](PyWatchdog& w) { return w.dog().running(); })
      .def(
          "note_batch", [](PyWatchdog& w, int64_t t_ns) { w.dog().note_batch(t_ns); }, "t_ns"_a)
      .def(
          "note_inter_batch_ns", [](PyWatchdog& w, int64_t ns) { w.dog().note_inter_batch_ns(ns); },
          "ns"_a)
      .def(
          "set_timeout_override",
          [](PyWatchdog& w, std::optional<double> s) { w.dog().set_timeout_override(s); },
          "seconds"_a.none())
      .def_prop_ro("timeout_s", [](PyWatchdog& w) { return w.dog().timeout_s(); })
      .def_prop_ro("p99_inter_batch_ns",
                   [](PyWatchdog& w) { return opt(w.dog().p99_inter_batch_ns()); })
      .def_prop_ro("hangs", [](PyWatchdog& w) { return w.dog().hangs(); })
      .def(
          "check",
          [](PyWatchdog& w, int64_t now) {
            nb::gil_scoped_release release;  // the probe takes the GIL itself
            return w.dog().check(now);
          },
          "now_ns"_a)
      .def("last_snapshot",
           [](PyWatchdog& w) -> nb::object {
             auto s = w.dog().last_snapshot();
             return s ? nb::object(snapshot_dict(*s)) : nb::none();
           })
      .def("last_findings", [](PyWatchdog& w) { return findings_list(w.dog().last_findings()); });

  // A watchdog thread calling into Python while the interpreter finalizes would be ended
  // mid-call; stop every live one first.
  m.def("_stop_all_watchdogs", [] {
    nb::gil_scoped_release release;
    stop_all_watchdogs();
  });
  nb::module_::import_("atexit").attr("register")(m.attr("_stop_all_watchdogs"));
}

}  // namespace dldoctor::ext
