// Glue for dldoctor_core/analyze: the Analyzer (an analyze::Session fed from Python) and the
// conversions of analyze_convert.hpp.
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <optional>
#include <string>

#include "analyze_convert.hpp"
#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/memory.hpp"
#include "dldoctor_core/analyze/rules/fd_limit.hpp"
#include "dldoctor_core/analyze/rules/io_bound.hpp"
#include "dldoctor_core/analyze/rules/shm_exhausted.hpp"
#include "dldoctor_core/analyze/session.hpp"
#include "dldoctor_core/analyze/tune.hpp"
#include "dldoctor_core/common/error.hpp"
#include "optional.hpp"
#include "register.hpp"
#include "sample_convert.hpp"
#include "system_convert.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {

namespace {

int64_t to_int(nb::handle v, const char* what) {
  int64_t x;
  if (nb::try_cast(v, x)) return x;
  try {
    return nb::cast<int64_t>(nb::int_(v));  // IntEnum and other __index__ types
  } catch (const std::exception&) {
    throw Error(std::string("event field ") + what + " must be an integer, got " + py_type(v));
  }
}

const char* start_method_name(trace::StartMethod m) {
  switch (m) {
    case trace::StartMethod::kFork:
      return "fork";
    case trace::StartMethod::kSpawn:
      return "spawn";
    case trace::StartMethod::kForkserver:
      return "forkserver";
    default:
      return nullptr;
  }
}

report::Severity severity_from(const std::string& s) {
  if (s == "critical") return report::Severity::kCritical;
  if (s == "warning") return report::Severity::kWarning;
  return report::Severity::kInfo;
}

}  // namespace

// --- out -------------------------------------------------------------------------------------

namespace {
DLDOCTOR_FIELDS(LoaderFigureFields, epochs, batches, batches_per_s, data_stall_pct,
                getitem_p50_ms, getitem_p99_ms, collate_p50_ms, fetch_p50_ms, consumer_step_ms,
                pin_memory_ms, batch_bytes, worker_on_cpu_fraction, worker_cpu_pct,
                runq_delay_pct);
}  // namespace

nb::dict finding_to_dict(const report::Finding& f) {
  nb::dict d;
  d["id"] = f.id;
  d["severity"] = report::severity_name(f.severity);
  d["title"] = f.title;
  nb::dict ev;
  for (const report::Evidence& e : f.evidence) {
    if (const double* x = std::get_if<double>(&e.value))
      ev[e.name.c_str()] = std::isfinite(*x) ? nb::cast(*x) : nb::none();
    else
      ev[e.name.c_str()] = std::get<std::string>(e.value);
  }
  d["evidence"] = ev;
  d["fix"] = f.fix;
  d["why"] = f.why;
  d["loader"] = f.loader >= 0 ? nb::cast(f.loader) : nb::none();
  if (f.rank >= 0) d["rank"] = f.rank;  // additive: only findings about one rank carry it
  d["score"] = f.score;
  return d;
}

nb::list findings_to_list(const std::vector<report::Finding>& findings) {
  return list_of(findings, finding_to_dict);
}

report::Finding finding_from_dict(nb::handle d) {
  if (!nb::isinstance<nb::dict>(d))
    throw Error("a finding must be a dict with 'id' and 'severity', got " + py_type(d));
  const char* w = "finding";
  report::Finding f;
  f.id = read_str(d, "id", w);
  f.severity = severity_from(read_str(d, "severity", w));
  f.score = read<double>(d, "score", w).value_or(0);
  f.loader = int(read<int64_t>(d, "loader", w).value_or(-1));
  return f;
}

nb::dict loader_summary_to_dict(const analyze::LoaderSummary& s) {
  const analyze::LoaderConfig& c = s.config;
  nb::dict d;
  d["id"] = s.id;
  d["config_known"] = c.known;
  d["num_workers"] = c.num_workers;
  d["batch_size"] = opt(c.batch_size);
  d["prefetch_factor"] = opt(c.prefetch_factor);
  d["pin_memory"] = c.known ? nb::cast(c.pin_memory()) : nb::none();
  d["persistent_workers"] = c.known ? nb::cast(c.persistent_workers()) : nb::none();
  d["in_order"] = c.known ? nb::cast(c.in_order()) : nb::none();
  d["drop_last"] = c.known ? nb::cast(c.drop_last()) : nb::none();
  d["custom_collate"] = c.known ? nb::cast(c.custom_collate()) : nb::none();
  d["dataset_kind"] = c.known ? nb::cast(c.iterable_dataset() ? "iterable" : "map") : nb::none();
  const char* sm = start_method_name(c.start_method);
  d["start_method"] = sm ? nb::cast(sm) : nb::none();
  d["timeout_ms"] = opt(c.timeout_ms);
  d["main_pid"] = c.main_pid > 0 ? nb::cast(c.main_pid) : nb::none();
  // A multi-rank job's loaders carry their rank (the keys `dldoctor attach` writes); a job
  // without ranks has none of these keys, as before.
  const analyze::RankId& r = s.rank;
  if (r.rank) d["rank"] = *r.rank;
  if (r.local_rank) d["local_rank"] = *r.local_rank;
  if (r.world_size) d["world_size"] = *r.world_size;
  if (r.local_world_size) d["local_world_size"] = *r.local_world_size;
  if (r.group_rank) d["group_rank"] = *r.group_rank;
  if (s.rank_loader > 0) d["rank_loader"] = s.rank_loader;
  put_fields<LoaderFigureFields>(d, s);
  d["read_mb_s"] = opt(s.read_mb_per_s);
  nb::list pids;
  for (int p : s.worker_pids) pids.append(p);
  d["worker_pids"] = pids;
  nb::list workers;
  for (const analyze::WorkerSummary& w : s.workers) {
    nb::dict wd;
    wd["worker"] = w.worker;
    wd["pid"] = w.pid > 0 ? nb::cast(w.pid) : nb::none();
    wd["batches"] = w.batches;
    wd["fetch_mean_ms"] = opt(w.fetch_mean_ms);
    wd["fetch_recent_p50_ms"] = opt(w.fetch_recent_p50_ms);
    wd["on_cpu_fraction"] = opt(w.on_cpu_fraction);
    workers.append(wd);
  }
  d["workers"] = workers;
  d["first_batch_latency_ms"] = opt(s.first_batch_latency_ms);
  nb::list per_epoch;
  for (double ms : s.first_batch_latency_ms_per_epoch) per_epoch.append(ms);
  d["first_batch_latency_ms_per_epoch"] = per_epoch;
  d["worker_exceptions"] = s.worker_exceptions;
  d["worker_deaths"] = s.worker_deaths;
  return d;
}

nb::list loader_summaries_to_list(const std::vector<analyze::LoaderSummary>& loaders) {
  return list_of(loaders, loader_summary_to_dict);
}

// --- in --------------------------------------------------------------------------------------

system::Facts facts_from_dict(nb::handle d) {
  if (!d.is_none() && !nb::isinstance<nb::dict>(d))
    throw Error("facts must be the dict collect_facts() returns, got " + py_type(d));
  const char* w = "facts";
  system::Facts f;
  get_fields<CpuFields>(f.cpu, field(d, "cpu"), w);
  get_fields<MemoryFields>(f.memory, field(d, "memory"), w);
  get_fields<ShmFields>(f.shm, field(d, "shm"), w);  // an empty path keeps /dev/shm
  get_fields<LimitFields>(f.limits, field(d, "limits"), w);
  nb::handle cont = field(d, "container");
  f.in_container = read<bool>(cont, "in_container", w);
  f.container_kind = read_str(cont, "kind", w);
  nb::handle pr = field(d, "pressure");
  f.cpu_pressure_some_avg10 = read<double>(pr, "cpu_some_avg10", w);
  f.io_pressure_some_avg10 = read<double>(pr, "io_some_avg10", w);
  f.mem_pressure_some_avg10 = read<double>(pr, "memory_some_avg10", w);
  f.cgroup_version = read_str(d, "cgroup_version", w);
  return f;
}

system::StorageFacts storage_from_dict(nb::handle d) {
  if (!nb::isinstance<nb::dict>(d))
    throw Error("storage must be the dict probe_storage() returns, got " + py_type(d));
  const char* w = "storage";
  return from_dict<system::StorageFacts, StorageFields>(d, w);
}

trace::Event event_from_tuple(nb::handle t) {
  if (!(nb::isinstance<nb::tuple>(t) || nb::isinstance<nb::list>(t)) || nb::len(t) != 12)
    throw Error(
        "an event must be the 12-tuple (kind, pid, t_ns, flags, loader, worker, index, "
        "count, v0, v1, v2, v3), got " +
        (nb::isinstance<nb::tuple>(t) || nb::isinstance<nb::list>(t)
             ? "a sequence of " + std::to_string(nb::len(t))
             : py_type(t)));
  static constexpr const char* kNames[] = {"kind",  "pid",   "t_ns", "flags", "loader", "worker",
                                           "index", "count", "v0",   "v1",    "v2",     "v3"};
  int64_t x[12];
  for (size_t i = 0; i < 12; ++i) x[i] = to_int(t[i], kNames[i]);
  trace::Event e;
  e.kind = trace::EventKind(uint8_t(x[0]));
  e.pid = uint32_t(x[1]);
  e.t_ns = x[2];
  e.flags = uint8_t(x[3]);
  e.loader = uint16_t(x[4]);
  e.worker = int16_t(x[5]);
  e.index = int32_t(x[6]);
  e.count = uint32_t(x[7]);
  for (int i = 0; i < 4; ++i) e.v[i] = x[8 + i];
  return e;
}

sample::Snapshot snapshot_from_dict(nb::handle d) {
  if (!nb::isinstance<nb::dict>(d))
    throw Error("a snapshot must be a dict with 't_ns', 'machine' and 'processes', got " +
                py_type(d));
  const char* w = "snapshot";
  sample::Snapshot s;
  get_fields<SnapshotClockFields>(s, d, w);
  get_fields<MachineFields>(s.machine, field(d, "machine"), w);
  for (nb::handle p : read_list(d, "processes", w)) {
    require_dict(p, "snapshot process");
    sample::ProcessSample x;
    get_fields<ProcessIdFields>(x, p, w);
    const std::string state = read_str(p, "state", w);
    x.state = state.empty() ? '?' : state[0];
    x.comm = read_str(p, "comm", w);
    x.num_threads = read<int>(p, "num_threads", w).value_or(0);
    get_fields<ProcessUseFields>(x, p, w);
    get_fields<ProcessIoFields>(x, p, w);
    x.wchan = read_str(p, "wchan", w);
    for (nb::handle th : read_list(p, "threads", w, Bad::kUnknown)) {
      sample::ThreadSample t;
      t.tid = int(read<int64_t>(th, "tid", w).value_or(0));
      const std::string ts = read_str(th, "state", w);
      t.state = ts.empty() ? '?' : ts[0];
      t.comm = read_str(th, "comm", w);
      t.cpu_pct = read<double>(th, "cpu_pct", w);
      t.runq_delay_pct = read<double>(th, "runq_delay_pct", w);
      x.threads.push_back(std::move(t));
    }
    s.processes.push_back(std::move(x));
  }
  return s;
}

analyze::HotFunction hot_function_from_dict(nb::handle d) {
  if (!nb::isinstance<nb::dict>(d))
    throw Error("a hot function must be a dict with 'name' and 'cumulative_ms', got " + py_type(d));
  const char* w = "hot function";
  analyze::HotFunction h;
  h.name = read_str(d, "name", w);
  if (h.name.empty()) h.name = read_str(d, "function", w);
  h.location = read_str(d, "location", w);
  if (h.location.empty()) {
    h.location = read_str(d, "file", w);
    if (auto line = read<int64_t>(d, "line", w); line && !h.location.empty())
      h.location += ":" + std::to_string(*line);
  }
  auto ms = read<double>(d, "cumulative_ms", w);
  if (!ms) ms = read<double>(d, "cum_ms", w);
  if (!ms) ms = read<double>(d, "ms", w);
  h.cumulative_ms = ms.value_or(0);
  h.self_ms = read<double>(d, "self_ms", w);
  h.calls = read<int64_t>(d, "calls", w).value_or(0);
  return h;
}

// --- dldoctor tune ----------------------------------------------------------------------------

namespace {

DLDOCTOR_FIELDS(TuneSettingsFields, num_workers, prefetch_factor, persistent_workers,
                worker_threads);
DLDOCTOR_FIELDS(TuneProfileFields, num_workers, prefetch_factor, persistent_workers, usable_cpus,
                cpu_workers, cpu_left, per_worker_cpu, fetch_s, step_s, main_cpu_cores,
                batches_per_s, off_cpu, startup_bound, thread_oversubscribed, keeps_up);
// A profile dict without prefetch_factor is the DataLoader's default.
static_assert(analyze::tune::Profile{}.prefetch_factor == analyze::kDefaultPrefetchFactor);

analyze::tune::Settings tune_settings(nb::handle d) {
  return from_dict<analyze::tune::Settings, TuneSettingsFields>(d, "tune settings");
}

nb::dict tune_settings_dict(const analyze::tune::Settings& s) {
  nb::dict d;  // only the settings a trial sets, by DataLoader keyword
  if (s.num_workers) d["num_workers"] = *s.num_workers;
  if (s.prefetch_factor) d["prefetch_factor"] = *s.prefetch_factor;
  if (s.persistent_workers) d["persistent_workers"] = *s.persistent_workers;
  if (s.worker_threads) d["worker_threads"] = *s.worker_threads;
  return d;
}

analyze::tune::Profile tune_profile(nb::handle d) {
  const std::string w = "tune profile";
  require_dict(d, w);
  return from_dict<analyze::tune::Profile, TuneProfileFields>(d, w);
}

std::vector<analyze::tune::Trial> tune_trials(nb::handle trials) {
  std::vector<analyze::tune::Trial> out;
  for (nb::handle t : nb::cast<nb::list>(trials)) {
    analyze::tune::Trial x;
    x.settings = tune_settings(field(t, "settings"));
    x.batches_per_s = read<double>(t, "batches_per_s", "tune trial");
    x.ci = read<double>(t, "ci", "tune trial").value_or(0);
    x.ok = read_str(t, "outcome", "tune trial") == "ok";
    out.push_back(x);
  }
  return out;
}

void register_tune(nb::module_& m) {
  m.def(
      "tune_next",
      [](nb::handle profile, nb::handle trials) -> nb::object {
        auto n = analyze::tune::next_trial(tune_profile(profile), tune_trials(trials));
        return n ? nb::object(tune_settings_dict(*n)) : nb::none();
      },
      nb::arg("profile"), nb::arg("trials"),
      "The next trial's settings (a dict by DataLoader keyword; {} the job's own), or None: "
      "from the diagnostic run's profile and the trials so far ({'settings', "
      "'batches_per_s', 'ci', 'outcome'}, the job's own settings first).");
  m.def(
      "tune_best",
      [](nb::handle trials) -> nb::object {
        auto b = analyze::tune::best_index(tune_trials(trials));
        return b ? nb::cast(*b) : nb::none();
      },
      nb::arg("trials"), "The index of the best trial (a gain must beat kMinGain), or None.");
  m.def(
      "tune_ceiling",
      [](nb::handle profile) -> nb::object {
        auto c = analyze::tune::ceiling(tune_profile(profile));
        if (!c) return nb::none();
        nb::dict d;
        d["limit"] = c->limit;
        d["batches_per_s"] = c->batches_per_s;
        return d;
      },
      nb::arg("profile"), "What limits throughput next: {'limit', 'batches_per_s'}, or None.");
  m.def(
      "tune_effective",
      [](nb::handle profile, nb::handle settings) {
        return tune_settings_dict(
            analyze::tune::effective(tune_profile(profile), tune_settings(settings)));
      },
      nb::arg("profile"), nb::arg("settings"), "The settings with the job's own filled in.");
  m.attr("TUNE_MIN_GAIN") = analyze::tune::kMinGain;
}

}  // namespace

// --- the Analyzer ----------------------------------------------------------------------------

void register_analyze(nb::module_& m) {
  // What `dldoctor check` shares with the rules, defined once here in the core.
  m.attr("SHM_MARGIN") = analyze::kShmMargin;
  m.attr("NOFILE_WARN_BELOW") = analyze::kFdRecommendedMin;
  m.attr("DEFAULT_PREFETCH_FACTOR") = analyze::kDefaultPrefetchFactor;
  m.attr("RAM_LOW_FRACTION") = analyze::kLowMemoryFraction;
  m.attr("MAIN_PROCESS_CORES") = analyze::kMainProcessCores;
  m.attr("CACHE_FIT_FRACTION") = analyze::kCacheFitFraction;
  // The stretch the streaming verdict (the early notices) looks at, for their words.
  m.attr("RECENT_WINDOW_S") = double(analyze::kRecentWindowNs) / 1e9;
  register_tune(m);
  m.def("shm_fix", &analyze::shm_fix, nb::arg("container_kind"), nb::arg("in_flight_bytes"),
        "The fix for a /dev/shm that must hold in_flight_bytes (SHM_MARGIN times over), as "
        "shm_exhausted and `dldoctor check` word it: whole GiB, then Docker, Kubernetes and "
        "bare-metal commands (container_kind's first), then fewer batches in flight.");

  using analyze::Session;
  nb::class_<Session>(m, "Analyzer",
                      "The streaming analyzer of one job: feed it events and sampler passes, "
                      "ask for findings over the last ~10 s or the whole run.")
      .def(nb::init<>())
      .def(
          "set_facts_dict",
          [](Session& s, nb::handle d) {
            s.set_facts(facts_from_dict(d));
            if (nb::handle st = field(d, "storage"); st.is_valid())
              s.set_data_storage(storage_from_dict(st));
          },
          nb::arg("facts"),
          "Machine facts as collect_facts() returns them (missing keys are unknown); a "
          "'storage' key (probe_storage()'s dict) also sets the data storage.")
      .def(
          "set_data_storage_dict",
          [](Session& s, nb::handle d) { s.set_data_storage(storage_from_dict(d)); },
          nb::arg("storage"), "The storage behind the dataset, as probe_storage() returns it.")
      .def(
          "ingest_event", [](Session& s, nb::handle t) { s.ingest(event_from_tuple(t)); },
          nb::arg("event"),
          "One event: (kind, pid, t_ns, flags, loader, worker, index, count, v0, v1, v2, v3).")
      .def(
          "ingest_events",
          [](Session& s, nb::handle events) {
            for (nb::handle t : events) s.ingest(event_from_tuple(t));
          },
          nb::arg("events"), "Many events (an iterable of 12-tuples).")
      .def(
          "ingest_snapshot", [](Session& s, nb::handle d) { s.ingest(snapshot_from_dict(d)); },
          nb::arg("snapshot"), "One sampler pass as a dict (None = unknown).")
      .def("note_worker_pid", &Session::note_worker_pid, nb::arg("loader"), nb::arg("worker"),
           nb::arg("pid"), nb::arg("t_ns") = 0,
           "Registers pid as worker `worker` of `loader` (kWorkerStart events do this).")
      .def(
          "add_hot_functions",
          [](Session& s, int loader, nb::handle functions) {
            if (loader < 0 || loader > 0xFFFF) throw Error("loader must be 0..65535");
            std::vector<analyze::HotFunction> hot;
            for (nb::handle h : functions) hot.push_back(hot_function_from_dict(h));
            s.add_hot_functions(uint16_t(loader), std::move(hot));
          },
          nb::arg("loader"), nb::arg("functions"),
          "Hot functions of a loader's fetch from sampled profiles: dicts with name, location "
          "(or file and line), cumulative_ms, self_ms, calls. Figures add up over calls.")
      .def(
          "findings",
          [](const Session& s, int64_t now_ns, bool whole_run) {
            std::vector<report::Finding> fs;
            {
              nb::gil_scoped_release release;
              fs = s.findings(now_ns,
                              whole_run ? analyze::Window::kWholeRun : analyze::Window::kRecent);
            }
            return findings_to_list(fs);
          },
          nb::arg("now_ns") = 0, nb::arg("whole_run") = true,
          "Findings as dicts, most important first: over the whole run, or (whole_run=False) "
          "over the ~10 s before now_ns (0: the newest time seen).")
      .def(
          "verdict",
          [](const Session&, nb::handle findings) {
            std::vector<report::Finding> fs;
            for (nb::handle f : findings) fs.push_back(finding_from_dict(f));
            return Session::verdict(fs);
          },
          nb::arg("findings"), "The id of the most important critical finding, else 'healthy'.")
      .def(
          "loaders",
          [](const Session& s) {
            std::vector<analyze::LoaderSummary> ls;
            {
              nb::gil_scoped_release release;
              ls = s.loaders();
            }
            return loader_summaries_to_list(ls);
          },
          "Per-loader whole-run figures as dicts, by loader id.")
      .def_prop_ro("latest_ns", &Session::latest_ns, "Newest timestamp seen (0: none).")
      .def_prop_ro("events", &Session::events, "Events ingested so far.");
}

}  // namespace dldoctor::ext
