// Glue for dldoctor_core/monitor: the live side of a watched run.
#include "dldoctor_core/monitor/monitor.hpp"

#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "analyze_convert.hpp"
#include "register.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {

void register_monitor(nb::module_& m) {
  using monitor::Monitor;
  nb::class_<Monitor>(m, "Monitor")
      .def(
          "__init__",
          [](Monitor* self, const std::string& ring_path, uint32_t capacity, double interval_s) {
            monitor::MonitorOptions opts;
            opts.sample_interval_s = interval_s;
            new (self) Monitor(ring_path, capacity, opts);
          },
          nb::arg("ring_path"), nb::arg("capacity") = 1u << 16, nb::arg("interval_s") = 0.1)
      .def("start", &Monitor::start, nb::arg("root_pid"), nb::call_guard<nb::gil_scoped_release>())
      .def("stop", &Monitor::stop, nb::call_guard<nb::gil_scoped_release>())
      .def("set_facts",
           [](Monitor& self, nb::handle facts) { self.session().set_facts(facts_from_dict(facts)); })
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
      .def("findings",
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
      .def("loaders",
           [](Monitor& self) {
             std::vector<analyze::LoaderSummary> ls;
             {
               nb::gil_scoped_release nogil;
               ls = self.session().loaders();
             }
             return loader_summaries_to_list(ls);
           })
      .def_prop_ro("events_seen", &Monitor::events_seen)
      .def_prop_ro("dropped", [](Monitor& self) { return self.ring().dropped(); })
      .def_prop_ro("last_batch_ns", &Monitor::last_batch_ns);
}

}  // namespace dldoctor::ext
