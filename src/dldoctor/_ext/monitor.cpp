// Glue for dldoctor_core/monitor: the live side of a watched run.
#include "dldoctor_core/monitor/monitor.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "analyze_convert.hpp"
#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/system/collect.hpp"
#include "monitor_convert.hpp"
#include "notes_convert.hpp"
#include "register.hpp"
#include "system_convert.hpp"
#include "watchdog_convert.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {

void register_monitor(nb::module_& m) {
  using monitor::Monitor;
  nb::class_<Monitor>(m, "Monitor")
      .def(
          "__init__",
          [](Monitor* self, const std::string& ring_path, uint32_t capacity, double interval_s,
             const std::string& run_dir, std::optional<double> hang_timeout_s,
             size_t trace_max_events) {
            monitor::MonitorOptions opts;
            opts.sample_interval_s = interval_s;
            opts.run_dir = run_dir;
            opts.hang_timeout_s = hang_timeout_s;
            opts.trace_max_events = trace_max_events;
            new (self) Monitor(ring_path, capacity, opts);
          },
          nb::arg("ring_path"), nb::arg("capacity") = 1u << 16, nb::arg("interval_s") = 0.1,
          nb::arg("run_dir") = "", nb::arg("hang_timeout_s") = nb::none(),
          nb::arg("trace_max_events") = 0)
      .def_prop_ro(
          "ring_path", [](Monitor& self) { return self.ring().path(); },
          "The path the job's processes open the ring by (for a ring in memory, "
          "/proc/<pid>/fd/<n>).")
      .def("start", &Monitor::start, nb::arg("root_pid"), nb::call_guard<nb::gil_scoped_release>())
      .def("stop", &Monitor::stop, nb::call_guard<nb::gil_scoped_release>())
      .def(
          "collect_facts",
          [](Monitor& self) {
            system::Facts f;
            {
              nb::gil_scoped_release nogil;
              f = system::collect();
              self.set_facts(f);
            }
            return facts_to_dict(f);
          },
          "Reads this machine's facts (as collect_facts()), hands them to the analysis as "
          "they are, and returns them as the dict the report's `system` section shows.")
      .def("set_data_storage",
           [](Monitor& self, nb::handle storage) {
             self.session().set_data_storage(storage_from_dict(storage));
           })
      .def("add_hot_functions",
           [](Monitor& self, uint16_t loader, nb::handle functions) {
             std::vector<analyze::HotFunction> fs;
             for (nb::handle f : functions) fs.push_back(hot_function_from_dict(f));
             self.session().add_hot_functions(loader, std::move(fs));
           })
      .def(
          "note_failure",
          [](Monitor& self, nb::handle note) { self.session().note(failure_note_from_dict(note)); },
          nb::arg("note"), "A failure note (dict with 'kind') from the side logs.")
      .def(
          "findings",
          [](Monitor& self, bool whole_run) {
            std::vector<report::Finding> fs;
            {
              nb::gil_scoped_release nogil;
              fs = self.session().findings(
                  0, whole_run ? analyze::Window::kWholeRun : analyze::Window::kRecent);
            }
            return findings_to_list(fs);
          },
          nb::arg("whole_run") = true)
      .def(
          "decide",
          [](Monitor& self, bool whole_run) {
            analyze::Decision d;
            {
              nb::gil_scoped_release nogil;
              d = self.decide(whole_run ? analyze::Window::kWholeRun : analyze::Window::kRecent);
            }
            nb::dict out;
            out["verdict"] = d.verdict;
            out["findings"] = findings_to_list(d.findings);
            out["note"] = d.note;
            return out;
          },
          nb::arg("whole_run") = true,
          "The report decided: {'verdict', 'findings', 'note'}, most important first; over the "
          "whole run the newest hang's findings are merged in. 'unknown' when no DataLoader was "
          "seen, or a run too short to judge would be 'healthy'; 'note' says why ('' "
          "otherwise).")
      .def("loaders",
           [](Monitor& self) {
             std::vector<analyze::LoaderSummary> ls;
             {
               nb::gil_scoped_release nogil;
               ls = self.session().loaders();
             }
             return loader_summaries_to_list(ls);
           })
      // Issue 6: what the hooks measured of datasets, slow batches and worker pools.
      .def("note_dataset",
           [](Monitor& self, uint16_t loader, nb::handle d) {
             self.session().note_dataset(loader, dataset_notes_from_dict(d));
           })
      .def("note_slow_batch",
           [](Monitor& self, uint16_t loader, nb::handle d) {
             self.session().note_slow_batch(loader, slow_batch_from_dict(d));
           })
      .def(
          "note_rank",
          [](Monitor& self, uint16_t loader, std::optional<int> rank, std::optional<int> local_rank,
             std::optional<int> world_size, std::optional<int> local_world_size,
             std::optional<int> group_rank) {
            self.session().note_rank(loader,
                                     {rank, local_rank, world_size, local_world_size, group_rank});
          },
          nb::arg("loader"), nb::arg("rank") = nb::none(), nb::arg("local_rank") = nb::none(),
          nb::arg("world_size") = nb::none(), nb::arg("local_world_size") = nb::none(),
          nb::arg("group_rank") = nb::none(),
          "The rank of a loader's main process (the iter_start record's rank fields).")
      .def("note_torch_threads",
           [](Monitor& self, int pid, int threads) {
             self.session().note_torch_threads(pid, threads);
           })
      .def(
          "set_loader_notes",
          [](Monitor& self, uint16_t loader, const std::string& collate_fn,
             const std::string& worker_init_fn, std::optional<int> main_threads,
             std::vector<std::string> names) {
            monitor::LoaderNotes n;
            n.collate_fn = collate_fn;
            n.worker_init_fn = worker_init_fn;
            n.main_threads = main_threads;
            n.main_thread_names = std::move(names);
            self.set_loader_notes(loader, std::move(n));
          },
          nb::arg("loader"), nb::arg("collate_fn") = "", nb::arg("worker_init_fn") = "",
          nb::arg("main_threads") = nb::none(),
          nb::arg("main_thread_names") = std::vector<std::string>{})
      .def("last_hang",
           [](Monitor& self) -> nb::object {
             auto snap = self.last_hang();
             if (!snap) return nb::none();
             nb::dict d;
             d["snapshot"] = hang_snapshot_to_dict(*snap);
             d["findings"] = hang_findings_to_list(self.last_hang_findings());
             return d;
           })
      .def(
          "series",
          [](Monitor& self) {
            monitor::SeriesData d;
            {
              nb::gil_scoped_release nogil;
              d = self.series().data();
            }
            return series_to_dict(d);
          },
          "The run over time: per loader, per worker and machine series (Report.series).")
      .def(
          "live",
          [](Monitor& self) {
            monitor::LiveData d;
            {
              nb::gil_scoped_release nogil;
              self.catch_up();  // this instant's counts (the drain thread lags by up to 0.1 s)
              d = self.series().live(now_ns());
            }
            return live_to_dict(d);
          },
          "The figures of the last two seconds, for the live view.")
      .def(
          "trace_events",
          [](Monitor& self) -> nb::object {
            const monitor::TraceStore* t = self.trace_store();
            if (t == nullptr) return nb::none();
            monitor::TraceContents c;
            {
              nb::gil_scoped_release nogil;
              c = t->contents();
            }
            return trace_to_dict(c);
          },
          "Raw events and counters kept for --trace (None unless trace_max_events > 0).")
      .def_prop_ro("hangs", &Monitor::hangs)
      .def_prop_ro("hang_timeout_s", &Monitor::hang_timeout_s)
      .def_prop_ro("events_seen", &Monitor::events_seen)
      .def_prop_ro("dropped", [](Monitor& self) { return self.ring().dropped(); })
      .def_prop_ro("last_batch_ns", &Monitor::last_batch_ns);
}

}  // namespace dldoctor::ext
