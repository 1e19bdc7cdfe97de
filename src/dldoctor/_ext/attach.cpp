// Glue for analyze/attach_view: `dldoctor attach`'s session. It owns the /proc sampler of
// the attached tree (its own C++ thread), feeds the session and the series, takes py-spy's
// stack samples and dumps as plain Python values, and returns what was decided as dicts.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "analyze_convert.hpp"
#include "dldoctor_core/analyze/attach_view.hpp"
#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"
#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/monitor/series.hpp"
#include "dldoctor_core/sample/sampler.hpp"
#include "dldoctor_core/system/collect.hpp"
#include "monitor_convert.hpp"
#include "fields.hpp"
#include "optional.hpp"
#include "register.hpp"
#include "system_convert.hpp"
#include "watchdog_convert.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {
namespace {

/// The % of one core an attached job's smaps_rollup reads may use (PyAttach::start).
constexpr double kAttachSmapsBudgetPct = 1.0;

using analyze::AttachedLoader;
using analyze::AttachSession;


trace::StartMethod start_method_from(const std::string& s) {
  if (s == "fork") return trace::StartMethod::kFork;
  if (s == "spawn") return trace::StartMethod::kSpawn;
  if (s == "forkserver") return trace::StartMethod::kForkserver;
  return trace::StartMethod::kUnknown;
}

// The attached loader's plain fields after its pids and start method (in only), and a
// loader's stack shares (out only).
DLDOCTOR_FIELDS(AttachedLoaderFields, pin_memory, persistent_workers, collate_fn, worker_init_fn);
DLDOCTOR_FIELDS(StackSharesFields, window_s, main_samples, main_in_loader, main_collective,
                fetch_samples, getitem, collate, reading, idle, sending, other, failed_samples);

AttachedLoader loader_from(nb::handle d) {
  const char* w = "attached loader";
  require_dict(d, w);
  AttachedLoader l;
  l.loader = read<int>(d, "loader", w).value_or(0);
  l.main_pid = read<int>(d, "main_pid", w).value_or(0);
  if (l.main_pid <= 0) throw Error("attached loader field 'main_pid' must be a pid");
  l.num_workers = read<int>(d, "num_workers", w).value_or(0);
  for (nb::handle p : read_list(d, "worker_pids", w))
    l.worker_pids.push_back(as<int>(p, w, "worker_pids").value_or(0));
  l.start_method = start_method_from(read_str(d, "start_method", w));
  get_fields<AttachedLoaderFields>(l, d, w);
  return l;
}

/// A frame of py-spy's JSON ({"name", "filename", "line"}) or a (name, file, line) tuple.
watchdog::PyFrame frame_from(nb::handle f, std::string* qualified) {
  const char* w = "py-spy frame";
  std::string name, file;
  std::optional<int> line;
  if (nb::isinstance<nb::dict>(f)) {
    name = read_str(f, "name", w);
    file = read_str(f, "filename", w);
    line = read<int>(f, "line", w);
  } else if ((nb::isinstance<nb::tuple>(f) || nb::isinstance<nb::list>(f)) && nb::len(f) == 3) {
    name = as<std::string>(f[0], w, "name").value_or("");
    file = as<std::string>(f[1], w, "file").value_or("");
    line = as<int>(f[2], w, "line");
  } else {
    throw Error("a py-spy frame must be a dict or a (name, file, line) tuple, got " + py_type(f));
  }
  if (qualified) *qualified = name;
  return analyze::frame_from_pyspy(name, file, line);
}

/// py-spy dump's JSON threads ([{"thread_name", "os_thread_id", "frames": [...]}], each
/// stack most recent call first) as faulthandler-shaped stacks.
std::vector<watchdog::PyThreadStack> dump_from(nb::handle threads) {
  std::vector<watchdog::PyThreadStack> out;
  for (nb::handle t : nb::iter(threads)) {
    const char* w = "py-spy thread";
    require_dict(t, w);
    watchdog::PyThreadStack s;
    if (auto tid = read<int64_t>(t, "os_thread_id", w)) s.thread_id = std::to_string(*tid);
    s.current = read<bool>(t, "active", w).value_or(false);
    for (nb::handle f : read_list(t, "frames", w)) s.frames.push_back(frame_from(f, nullptr));
    s.no_python_frame = s.frames.empty();
    out.push_back(std::move(s));
  }
  return out;
}

/// One loader for the report's `loaders`: the keys of a watched run's loaders, None for
/// what only the hooks measure (batch size, batches, per-batch times, bytes).
nb::dict loader_to_dict(const analyze::LoaderView& l, const AttachedLoader& a) {
  nb::dict d;
  d["id"] = int(l.loader);
  d["config_known"] = false;
  d["num_workers"] = l.config.num_workers;
  d["batch_size"] = nb::none();
  d["prefetch_factor"] = nb::none();
  d["pin_memory"] = a.pin_memory ? nb::cast(true) : nb::none();
  d["persistent_workers"] = nb::none();
  const char* kMethods[] = {nullptr, "fork", "spawn", "forkserver"};
  const size_t m = size_t(a.start_method);
  d["start_method"] = m < 4 && kMethods[m] ? nb::cast(kMethods[m]) : nb::none();
  d["main_pid"] = a.main_pid;
  d["epochs"] = nb::none();
  d["batches"] = nb::none();
  d["batches_per_s"] = nb::none();
  d["data_stall_pct"] = l.data_stall_fraction ? nb::cast(*l.data_stall_fraction * 100) : nb::none();
  d["getitem_p50_ms"] = nb::none();
  d["getitem_p99_ms"] = nb::none();
  d["collate_p50_ms"] = nb::none();
  d["fetch_p50_ms"] = nb::none();
  d["batch_bytes"] = nb::none();
  d["worker_on_cpu_fraction"] = opt(l.on_cpu_fraction);
  d["worker_cpu_pct"] = opt(l.fetchers.cpu_pct);
  d["runq_delay_pct"] = opt(l.fetchers.runq_delay_pct);
  d["read_mb_s"] =
      l.fetchers.read_bytes_per_s ? nb::cast(*l.fetchers.read_bytes_per_s / 1e6) : nb::none();
  nb::list pids, workers;
  for (size_t i = 0; i < a.worker_pids.size(); ++i) {
    if (a.worker_pids[i] <= 0) continue;
    pids.append(a.worker_pids[i]);
    nb::dict w;
    w["worker"] = int(i);
    w["pid"] = a.worker_pids[i];
    for (const auto& [pid, pct] : l.fetchers.cpu_pct_each)
      if (pid == a.worker_pids[i]) w["cpu_pct"] = pct;
    workers.append(w);
  }
  d["worker_pids"] = pids;
  d["workers"] = workers;
  d["stacks"] = l.stacks ? nb::object(to_dict<StackSharesFields>(*l.stacks)) : nb::none();
  d["hot_functions"] = list_of(l.hot_functions, [](const analyze::HotFunction& h) {
    nb::dict f;
    f["name"] = h.name;
    f["location"] = h.location;
    f["cumulative_ms"] = h.cumulative_ms;
    f["self_ms"] = opt(h.self_ms);
    return f;
  });
  return d;
}

nb::dict tally_to_dict(const analyze::ProcessTally& t) {
  nb::dict d;
  d["pid"] = t.pid;
  d["thread"] = t.thread;
  d["samples"] = t.samples;
  d["failed"] = t.failed;
  d["distinct_stacks"] = t.distinct;
  d["pin_thread"] = t.pin_thread;
  nb::dict places;
  for (const auto& [p, n] : t.places) places[analyze::sampled_place_name(p)] = n;
  d["places"] = places;
  return d;
}

/// The attach session with its sampler and series.
class PyAttach {
 public:
  PyAttach(nb::handle loaders, double interval_s) : interval_s_(interval_s) {
    if (!(interval_s > 0)) throw Error("attach: interval_s must be positive");
    std::vector<AttachedLoader> ls;
    for (nb::handle l : nb::iter(loaders)) ls.push_back(loader_from(l));
    if (ls.empty()) throw Error("attach: no loader to watch");
    system::Facts f;
    {
      nb::gil_scoped_release nogil;
      f = system::collect();
    }
    session_ = std::make_unique<AttachSession>(std::move(ls), f);
  }
  ~PyAttach() { stop(); }

  void start(const std::vector<int>& roots) {
    if (roots.empty()) throw Error("attach: no process to sample");
    if (sampler_) throw Error("attach: already started");
    sample::SamplerOptions so;
    so.interval_ns = int64_t(interval_s_ * 1e9);
    // smaps_rollup of two workers only (analyze::kAttachMemoryWorkers), within its own
    // budget (not `run`'s whole-sampler one): copy-on-write growth over time needs a
    // worker's Private_Dirty every few seconds, and one read of a forked torch worker walks
    // its page tables for 5-25 ms. One percent of one core reads each of the two every 1-3 s
    // (4-8 reads in the default 10 s, the start-up reads repaid); every cycle here is the
    // job's, so no more, and the main process (the costliest read) none.
    so.smaps_budget_pct = kAttachSmapsBudgetPct;
    so.smaps_preferred_only = true;
    so.total_budget_pct = 0;
    sampler_ = std::make_unique<sample::Sampler>(roots.front(), so);
    const std::vector<int> mw = session_->memory_workers();
    const std::set<int> workers(mw.begin(), mw.end());
    sampler_->set_smaps_priority([workers](int pid) { return workers.count(pid) > 0; });
    for (size_t i = 1; i < roots.size(); ++i) sampler_->add_root(roots[i]);
    const int64_t t0 = now_ns();
    series_.start(t0);
    // The series know the processes' roles from these (the hooks' events, made here).
    std::vector<trace::Event> roles;
    for (const AttachedLoader& l : session_->loaders()) {
      trace::Event e;
      e.kind = trace::EventKind::kIterStart;
      e.t_ns = t0;
      e.loader = uint16_t(l.loader);
      e.worker = int16_t(l.num_workers);
      e.v[1] = l.main_pid;
      roles.push_back(e);
      for (size_t i = 0; i < l.worker_pids.size(); ++i) {
        if (l.worker_pids[i] <= 0) continue;
        trace::Event w;
        w.kind = trace::EventKind::kWorkerStart;
        w.t_ns = t0;
        w.pid = uint32_t(l.worker_pids[i]);
        w.loader = uint16_t(l.loader);
        w.worker = int16_t(i);
        roles.push_back(w);
      }
    }
    series_.ingest(roles);
    AttachSession* s = session_.get();
    monitor::SeriesRecorder* series = &series_;
    sampler_->set_callback([s, series](const sample::Snapshot& snap) {
      s->ingest(snap);
      series->ingest(snap);
    });
    session_->set_window(t0, t0);
    from_ns_ = t0;
    nb::gil_scoped_release nogil;
    sampler_->start();
  }

  void stop() {
    if (!sampler_) return;
    {
      nb::gil_scoped_release nogil;
      sampler_->stop();
    }
    session_->set_window(from_ns_, now_ns());
  }

  /// The stack samples of one process: py-spy's frame table and, per thread, its distinct
  /// stacks (frame indices root first, as speedscope lists them) with their counts.
  void add_samples(int pid, nb::handle frames, nb::handle threads, int64_t failed,
                   double period_ms) {
    std::vector<watchdog::PyFrame> table;
    std::vector<std::string> names;
    for (nb::handle f : nb::iter(frames)) {
      names.emplace_back();
      table.push_back(frame_from(f, &names.back()));
    }
    std::vector<analyze::ThreadSamples> out;
    for (nb::handle t : nb::iter(threads)) {
      const char* w = "sampled thread";
      if (!nb::isinstance<nb::tuple>(t) || nb::len(t) != 3)
        throw Error("a sampled thread must be (name, tid, [(frame indices, count)])");
      analyze::ThreadSamples th;
      th.name = as<std::string>(t[0], w, "name").value_or("");
      th.tid = as<int64_t>(t[1], w, "tid").value_or(0);
      for (nb::handle st : nb::iter(t[2])) {
        if (nb::len(st) != 2) throw Error("a sampled stack must be (frame indices, count)");
        analyze::SampledStack s;
        s.count = as<int64_t>(st[1], w, "count").value_or(0);
        std::vector<size_t> idx;
        for (nb::handle i : nb::iter(st[0])) {
          auto k = as<int64_t>(i, w, "frame index");
          if (!k || *k < 0 || size_t(*k) >= table.size())
            throw Error("a sampled stack names a frame index out of range");
          idx.push_back(size_t(*k));
        }
        for (size_t j = idx.size(); j-- > 0;) {  // root first in, most recent call first out
          s.frames.push_back(table[idx[j]]);
          s.names.push_back(names[idx[j]]);
        }
        if (s.count > 0) th.stacks.push_back(std::move(s));
      }
      out.push_back(std::move(th));
    }
    nb::gil_scoped_release nogil;
    session_->add_samples(pid, std::move(out), failed, period_ms);
  }

  void keep_loaders(const std::vector<int>& ids) {
    session_->keep_loaders(std::set<int>(ids.begin(), ids.end()));
  }

  nb::list stuck_loaders() const {
    nb::list out;
    for (int l : session_->stuck_loaders()) out.append(l);
    return out;
  }

  nb::dict capture_hang(nb::handle dumps, nb::handle notes, nb::handle threads_at_fork) {
    if (!threads_at_fork.is_none())
      for (auto [k, v] : nb::borrow<nb::dict>(threads_at_fork)) {
        std::vector<std::string> names;
        for (nb::handle n : nb::iter(v)) names.push_back(nb::cast<std::string>(nb::str(n)));
        session_->note_threads_at_fork(nb::cast<int>(k), std::move(names));
      }
    std::map<int, std::vector<watchdog::PyThreadStack>> stacks;
    for (auto [k, v] : nb::borrow<nb::dict>(dumps)) stacks[nb::cast<int>(k)] = dump_from(v);
    std::map<int, std::string> why;
    if (!notes.is_none())
      for (auto [k, v] : nb::borrow<nb::dict>(notes))
        why[nb::cast<int>(k)] = nb::cast<std::string>(nb::str(v));
    {
      nb::gil_scoped_release nogil;
      hang_ = session_->capture_hang(std::move(stacks), why);
      hang_findings_ = analyze::classify_hang(*hang_, session_->hang_context());
    }
    nb::dict d;
    d["snapshot"] = hang_snapshot_to_dict(*hang_);
    d["findings"] = hang_findings_to_list(hang_findings_);
    return d;
  }

  nb::dict decide() const {
    analyze::Decision d;
    {
      nb::gil_scoped_release nogil;
      d = session_->decide(hang_findings_, hang_.has_value());
    }
    nb::dict out;
    out["verdict"] = d.verdict;
    out["findings"] = findings_to_list(d.findings);
    return out;
  }

  nb::list loaders() const {
    const analyze::JobView v = session_->view();
    const std::vector<AttachedLoader> attached = session_->loaders();
    nb::list out;
    for (size_t i = 0; i < v.loaders.size() && i < attached.size(); ++i)
      out.append(loader_to_dict(v.loaders[i], attached[i]));
    return out;
  }

  nb::list tallies() const { return list_of(session_->tallies(), tally_to_dict); }
  nb::dict facts() const { return facts_to_dict(session_->facts()); }
  nb::dict series() const {
    monitor::SeriesData d;
    {
      nb::gil_scoped_release nogil;
      d = series_.data();
    }
    return series_to_dict(d);
  }
  int64_t passes() const { return sampler_ ? int64_t(sampler_->samples_taken()) : 0; }

 private:
  double interval_s_;
  std::unique_ptr<AttachSession> session_;
  std::unique_ptr<sample::Sampler> sampler_;
  monitor::SeriesRecorder series_;
  int64_t from_ns_ = 0;
  std::optional<watchdog::HangSnapshot> hang_;
  std::vector<report::Finding> hang_findings_;
};

}  // namespace

void register_attach(nb::module_& m) {
  m.attr("STACK_IDLE_SHARE") = analyze::kStackIdleShare;
  m.attr("MIN_STACK_SAMPLES") = analyze::kMinStackSamples;
  nb::class_<PyAttach>(m, "Attach",
                       "`dldoctor attach`'s session: samples the attached tree from /proc on its "
                       "own thread, takes py-spy's stack samples, and decides the report.")
      .def(nb::init<nb::handle, double>(), nb::arg("loaders"), nb::arg("interval_s") = 0.1,
           "loaders: [{loader, main_pid, num_workers, worker_pids, start_method, pin_memory, "
           "persistent_workers, collate_fn, worker_init_fn}]; reads the machine's facts.")
      .def("start", &PyAttach::start, nb::arg("roots"),
           "Starts sampling the trees under `roots` (the main processes).")
      .def("stop", &PyAttach::stop, "Stops sampling; the window ends now.")
      .def("add_samples", &PyAttach::add_samples, nb::arg("pid"), nb::arg("frames"),
           nb::arg("threads"), nb::arg("failed") = 0, nb::arg("period_ms") = 0.0,
           "One process's stack samples: frames [(name, file, line)], threads [(name, tid, "
           "[(frame indices root first, count)])], samples that failed, ms per sample.")
      .def("keep_loaders", &PyAttach::keep_loaders, nb::arg("ids"),
           "Forgets every loader not in `ids` (mains whose samples showed no loader).")
      .def("stuck_loaders", &PyAttach::stuck_loaders,
           "Loaders whose main process sat in them while nothing of them used CPU.")
      .def("capture_hang", &PyAttach::capture_hang, nb::arg("dumps"), nb::arg("notes") = nb::none(),
           nb::arg("threads_at_fork") = nb::none(),
           "Captures the stuck tree (kernel view, CPU since the window began) with `dumps` "
           "({pid: py-spy dump's JSON threads}), `notes` ({pid: why no stack}) and "
           "`threads_at_fork` ({main pid: names of its threads older than its workers}), and "
           "classifies it: {snapshot, findings}.")
      .def("decide", &PyAttach::decide,
           "The report decided: {verdict, findings}, the hang's findings merged in.")
      .def("loaders", &PyAttach::loaders, "The loaders for the report (None: unknown).")
      .def("tallies", &PyAttach::tallies, "Per process: its stack samples by place.")
      .def("facts", &PyAttach::facts, "The machine's facts, narrowed to the job.")
      .def("series", &PyAttach::series, "The window over time (Report.series).")
      .def_prop_ro("passes", &PyAttach::passes, "Sampler passes taken.");
}

}  // namespace dldoctor::ext
