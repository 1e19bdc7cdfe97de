// Glue for dldoctor_core/watchdog: the faulthandler parser, the /proc probe, stack capture,
// the hang classifier over dict-shaped captures, and the Watchdog thread with a Python probe.
// Dicts in and out use the field names of hang.hpp; unknown values are None. Every wait
// (stack capture, stopping the thread) runs with the GIL released.
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

#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/analyze/rules.hpp"
#include "dldoctor_core/watchdog/proc_probe.hpp"
#include "dldoctor_core/watchdog/stack.hpp"
#include "dldoctor_core/watchdog/watchdog.hpp"
#include "register.hpp"
#include "watchdog_convert.hpp"
#include "analyze_convert.hpp"
#include "optional.hpp"

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

nb::dict frame_dict(const wd::PyFrame& f) {
  nb::dict d;
  d["file"] = str_or_none(f.file);
  d["line"] = opt(f.line);
  d["function"] = str_or_none(f.function);
  d["code"] = str_or_none(f.code);
  return d;
}

nb::list threads_list(const std::vector<wd::PyThreadStack>& stacks) {
  nb::list out;
  for (const wd::PyThreadStack& t : stacks) {
    nb::dict d;
    d["thread_id"] = str_or_none(t.thread_id);
    d["current"] = t.current;
    d["no_python_frame"] = t.no_python_frame;
    d["elided"] = t.elided;
    d["truncated"] = t.truncated;
    nb::list frames;
    for (const wd::PyFrame& f : t.frames) frames.append(frame_dict(f));
    d["frames"] = frames;
    out.append(d);
  }
  return out;
}

nb::list thread_probes(const std::vector<wd::ThreadProbe>& threads) {
  nb::list out;
  for (const wd::ThreadProbe& t : threads) {
    nb::dict d;
    d["tid"] = t.tid;
    d["name"] = str_or_none(t.name);
    d["state"] = str_or_none(t.state);
    d["wchan"] = str_or_none(t.wchan);
    d["syscall"] = str_or_none(t.syscall);
    out.append(d);
  }
  return out;
}

nb::dict probe_dict(const wd::ProcessProbe& p) {
  nb::dict d;
  d["pid"] = p.pid;
  d["gone"] = p.gone;
  d["state"] = str_or_none(p.state);
  d["comm"] = str_or_none(p.comm);
  d["wchan"] = str_or_none(p.wchan);
  d["syscall"] = str_or_none(p.syscall);
  d["syscall_nr"] = opt(p.syscall_nr);
  d["cpu_ns"] = opt(p.cpu_ns);
  d["num_threads"] = opt(p.num_threads);
  d["exit_code"] = opt(p.exit_code);
  d["exit_signal"] = opt(p.exit_signal);
  d["threads"] = thread_probes(p.threads);
  return d;
}

nb::dict capture_dict(const wd::ProcessCapture& p) {
  nb::dict d;
  d["pid"] = p.pid;
  d["loader"] = p.loader;
  d["worker"] = p.worker;
  d["state"] = str_or_none(p.state);
  d["wchan"] = str_or_none(p.wchan);
  d["syscall"] = str_or_none(p.syscall);
  d["cpu_ns_since_stall"] = opt(p.cpu_ns_since_stall);
  d["cpu_window_s"] = p.cpu_window_s;
  d["stacks"] = threads_list(p.stacks);
  d["raw_stack"] = p.raw_stack;
  d["stack_note"] = str_or_none(p.stack_note);
  d["gone"] = p.gone;
  d["exit_code"] = opt(p.exit_code);
  d["exit_signal"] = opt(p.exit_signal);
  d["io_target"] = str_or_none(p.io_target);
  d["threads"] = thread_probes(p.threads);
  return d;
}

nb::dict snapshot_dict(const wd::HangSnapshot& s) {
  nb::dict d;
  d["t_ns"] = s.t_ns;
  d["stalled_s"] = s.stalled_s;
  d["timeout_s"] = s.timeout_s;
  nb::list procs;
  for (const wd::ProcessCapture& p : s.processes) procs.append(capture_dict(p));
  d["processes"] = procs;
  return d;
}

// The same finding dicts as the analyzer's (loader None when the finding is about the job).
nb::list findings_list(const std::vector<report::Finding>& findings) {
  return findings_to_list(findings);
}

// ---- Python -> C++ (bad shapes become one-line CoreErrors) ----------------------------------

[[noreturn]] void bad(const std::string& where, const char* key, const char* want) {
  throw Error(where + ": '" + key + "' must be " + want);
}

nb::handle get(nb::handle d, const char* key) {
  if (!nb::isinstance<nb::dict>(d)) return nb::handle();
  nb::dict dd = nb::borrow<nb::dict>(d);
  if (!dd.contains(key)) return nb::handle();
  nb::handle v = dd[key];
  return v.is_none() ? nb::handle() : v;
}

template <typename T>
std::optional<T> get_opt(nb::handle d, const char* key, const std::string& where,
                         const char* want) {
  nb::handle v = get(d, key);
  if (!v) return std::nullopt;
  T out;
  if (!nb::try_cast<T>(v, out)) bad(where, key, want);
  return out;
}

std::string get_str(nb::handle d, const char* key, const std::string& where) {
  return get_opt<std::string>(d, key, where, "a str").value_or("");
}

nb::list get_list(nb::handle d, const char* key, const std::string& where) {
  nb::handle v = get(d, key);
  if (!v) return nb::list();
  if (!nb::isinstance<nb::list>(v) && !nb::isinstance<nb::tuple>(v)) bad(where, key, "a list");
  return nb::list(v);
}

void require_dict(nb::handle d, const std::string& what) {
  if (!nb::isinstance<nb::dict>(d)) throw Error(what + " must be a dict");
}

std::vector<wd::PyThreadStack> stacks_from(nb::handle list, const std::string& where) {
  std::vector<wd::PyThreadStack> out;
  for (nb::handle t : nb::list(list)) {
    require_dict(t, where + " stack");
    wd::PyThreadStack s;
    s.thread_id = get_str(t, "thread_id", where);
    s.current = get_opt<bool>(t, "current", where, "a bool").value_or(false);
    s.no_python_frame = get_opt<bool>(t, "no_python_frame", where, "a bool").value_or(false);
    s.elided = get_opt<bool>(t, "elided", where, "a bool").value_or(false);
    s.truncated = get_opt<bool>(t, "truncated", where, "a bool").value_or(false);
    for (nb::handle f : get_list(t, "frames", where)) {
      require_dict(f, where + " frame");
      wd::PyFrame fr;
      fr.file = get_str(f, "file", where);
      fr.line = get_opt<int>(f, "line", where, "an int");
      fr.function = get_str(f, "function", where);
      fr.code = get_str(f, "code", where);
      s.frames.push_back(std::move(fr));
    }
    out.push_back(std::move(s));
  }
  return out;
}

wd::ProcessCapture capture_from(nb::handle d) {
  const std::string where = "hang snapshot process";
  require_dict(d, where);
  wd::ProcessCapture p;
  auto pid = get_opt<int>(d, "pid", where, "an int");
  if (!pid) bad(where, "pid", "an int");
  p.pid = *pid;
  p.loader = get_opt<int>(d, "loader", where, "an int").value_or(-1);
  p.worker = get_opt<int>(d, "worker", where, "an int").value_or(-1);
  p.state = get_str(d, "state", where);
  p.wchan = get_str(d, "wchan", where);
  p.syscall = get_str(d, "syscall", where);
  p.cpu_ns_since_stall = get_opt<int64_t>(d, "cpu_ns_since_stall", where, "an int");
  p.cpu_window_s = get_opt<double>(d, "cpu_window_s", where, "a float").value_or(0);
  p.raw_stack = get_str(d, "raw_stack", where);
  p.stack_note = get_str(d, "stack_note", where);
  p.gone = get_opt<bool>(d, "gone", where, "a bool").value_or(false);
  p.exit_code = get_opt<int>(d, "exit_code", where, "an int");
  p.exit_signal = get_opt<int>(d, "exit_signal", where, "an int");
  p.io_target = get_str(d, "io_target", where);
  if (nb::handle s = get(d, "stacks"); s && nb::len(nb::list(s)) > 0) {
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
  wd::HangSnapshot s;
  s.t_ns = get_opt<int64_t>(d, "t_ns", where, "an int").value_or(0);
  s.stalled_s = get_opt<double>(d, "stalled_s", where, "a float").value_or(0);
  s.timeout_s = get_opt<double>(d, "timeout_s", where, "a float").value_or(0);
  for (nb::handle p : get_list(d, "processes", where)) s.processes.push_back(capture_from(p));
  return s;
}

wd::HangContext context_from(nb::handle d) {
  const std::string where = "hang context";
  wd::HangContext c;
  if (!d || d.is_none()) return c;
  require_dict(d, where);
  for (nb::handle l : get_list(d, "loaders", where)) {
    const std::string lw = "hang context loader";
    require_dict(l, lw);
    wd::LoaderContext x;
    x.loader = get_opt<int>(l, "loader", lw, "an int").value_or(0);
    x.num_workers = get_opt<int>(l, "num_workers", lw, "an int");
    x.collate_fn = get_str(l, "collate_fn", lw);
    x.worker_init_fn = get_str(l, "worker_init_fn", lw);
    x.start_method = get_str(l, "start_method", lw);
    x.main_threads_at_fork = get_opt<int>(l, "main_threads_at_fork", lw, "an int");
    for (nb::handle n : get_list(l, "main_thread_names_at_fork", lw)) {
      std::string name;
      if (!nb::try_cast<std::string>(n, name)) bad(lw, "main_thread_names_at_fork", "a list of str");
      x.main_thread_names_at_fork.push_back(std::move(name));
    }
    x.waiting_batch = get_opt<int64_t>(l, "waiting_batch", lw, "an int");
    x.waiting_worker = get_opt<int>(l, "waiting_worker", lw, "an int");
    if (nb::handle o = get(l, "outstanding")) {
      if (!nb::isinstance<nb::dict>(o)) bad(lw, "outstanding", "a dict {worker: [batch, ...]}");
      for (auto [k, v] : nb::borrow<nb::dict>(o)) {
        int w = 0;
        if (!nb::try_cast<int>(k, w)) bad(lw, "outstanding", "a dict {worker: [batch, ...]}");
        std::vector<int64_t> idx;
        for (nb::handle b : nb::list(v)) {
          int64_t i = 0;
          if (!nb::try_cast<int64_t>(b, i)) bad(lw, "outstanding", "a dict {worker: [batch, ...]}");
          idx.push_back(i);
        }
        x.outstanding[w] = std::move(idx);
      }
    }
    if (nb::handle o = get(l, "batches_returned")) {
      if (!nb::isinstance<nb::dict>(o)) bad(lw, "batches_returned", "a dict {worker: count}");
      for (auto [k, v] : nb::borrow<nb::dict>(o)) {
        int w = 0;
        int64_t n = 0;
        if (!nb::try_cast<int>(k, w) || !nb::try_cast<int64_t>(v, n)) {
          bad(lw, "batches_returned", "a dict {worker: count}");
        }
        x.batches_returned[w] = n;
      }
    }
    x.timeout_s = get_opt<double>(l, "timeout_s", lw, "a float");
    c.loaders.push_back(std::move(x));
  }
  return c;
}

wd::WatchState state_from(nb::handle d) {
  const std::string where = "watchdog probe result";
  require_dict(d, where);
  wd::WatchState s;
  s.loader_active = get_opt<bool>(d, "loader_active", where, "a bool").value_or(false);
  s.waiting = get_opt<bool>(d, "waiting", where, "a bool").value_or(false);
  s.last_batch_ns = get_opt<int64_t>(d, "last_batch_ns", where, "an int");
  s.active_since_ns = get_opt<int64_t>(d, "active_since_ns", where, "an int");
  for (nb::handle p : get_list(d, "processes", where)) {
    const std::string pw = "watchdog probe process";
    require_dict(p, pw);
    wd::WatchedProcess w;
    auto pid = get_opt<int>(p, "pid", pw, "an int");
    if (!pid) bad(pw, "pid", "an int");
    w.pid = *pid;
    w.loader = get_opt<int>(p, "loader", pw, "an int").value_or(-1);
    w.worker = get_opt<int>(p, "worker", pw, "an int").value_or(-1);
    w.exit_code = get_opt<int>(p, "exit_code", pw, "an int");
    w.exit_signal = get_opt<int>(p, "exit_signal", pw, "an int");
    s.processes.push_back(w);
  }
  s.context = context_from(get(d, "context"));
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
    dog_ = std::make_unique<wd::Watchdog>(o, std::move(call_probe), analyze::classify_hang,
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

PyType_Slot watchdog_slots[] = {{Py_tp_traverse, (void*)watchdog_traverse},
                                {Py_tp_clear, (void*)watchdog_clear},
                                {0, nullptr}};

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
        "The signal the hooks register faulthandler on (job.hooks.STACK_SIGNAL).");

  m.def(
      "parse_faulthandler",
      [](const std::string& text) { return threads_list(wd::parse_faulthandler(text)); },
      "text"_a,
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

  auto capture = [](const std::vector<int>& pids, const std::string& run_dir, int signal,
                    int wait_ms) {
    if (wait_ms < 0) throw Error("capture_stacks: wait_ms must be >= 0");
    nb::gil_scoped_release release;
    return wd::capture_stacks(pids, run_dir, signal, wait_ms);
  };
  m.def(
      "capture_stacks",
      [capture](nb::handle pids, const std::string& run_dir, int signal, int wait_ms) {
        std::vector<int> v;
        for (nb::handle p : nb::iter(pids)) v.push_back(nb::cast<int>(p));
        nb::dict out;
        for (const wd::StackCapture& c : capture(v, run_dir, signal, wait_ms)) {
          out[nb::int_(c.pid)] = c.text;
        }
        return out;
      },
      "pids"_a, "run_dir"_a, "signal"_a = wd::default_stack_signal(), "wait_ms"_a = wd::kStackWaitMs,
      "Sends `signal` to each pid that handles it and returns {pid: text appended to "
      "<run_dir>/stack-<pid>.txt} ('' when nothing came within wait_ms).");
  m.def(
      "capture_stacks_detail",
      [capture](nb::handle pids, const std::string& run_dir, int signal, int wait_ms) {
        std::vector<int> v;
        for (nb::handle p : nb::iter(pids)) v.push_back(nb::cast<int>(p));
        nb::dict out;
        for (const wd::StackCapture& c : capture(v, run_dir, signal, wait_ms)) {
          nb::dict d;
          d["text"] = c.text;
          d["note"] = str_or_none(c.note);
          d["gone"] = c.gone;
          out[nb::int_(c.pid)] = d;
        }
        return out;
      },
      "pids"_a, "run_dir"_a, "signal"_a = wd::default_stack_signal(), "wait_ms"_a = wd::kStackWaitMs,
      "As capture_stacks, with why a stack is missing: {pid: {text, note, gone}}.");

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
      .def("note_batch", [](PyWatchdog& w, int64_t t_ns) { w.dog().note_batch(t_ns); }, "t_ns"_a)
      .def("note_inter_batch_ns",
           [](PyWatchdog& w, int64_t ns) { w.dog().note_inter_batch_ns(ns); }, "ns"_a)
      .def("set_timeout_override",
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
