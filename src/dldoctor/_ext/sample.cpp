// Glue for dldoctor_core/sample: the Sampler class and snapshots as plain dicts.
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/sample/cpu_top.hpp"
#include "dldoctor_core/sample/sampler.hpp"
#include "optional.hpp"
#include "register.hpp"
#include "sample_convert.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {
namespace {

// comm is whatever bytes a process put there (prctl, argv[0]); never let it raise.
nb::object text(const std::string& s) {
  return nb::steal(PyUnicode_DecodeUTF8(s.data(), Py_ssize_t(s.size()), "replace"));
}

nb::object state(char c) { return text(std::string(1, c)); }

nb::dict thread_to_dict(const sample::ThreadSample& t) {
  nb::dict d;
  d["tid"] = t.tid;
  d["state"] = state(t.state);
  d["comm"] = text(t.comm);
  d["cpu_pct"] = opt(t.cpu_pct);
  d["runq_delay_pct"] = opt(t.runq_delay_pct);
  return d;
}

DLDOCTOR_FIELDS(GpuSampleFields, index, utilization_pct, memory_used_bytes, memory_total_bytes,
                tree_memory_bytes);
DLDOCTOR_FIELDS(CpuUserFields, pid, comm, cmdline, cpu_pct);

nb::dict gpu_to_dict(const sample::GpuPass& g) {
  nb::dict d;
  d["measured"] = g.measured;
  d["not_measured"] = g.not_measured;
  d["devices"] = list_of(g.devices, [](const sample::GpuSample& x) {
    nb::dict dev = to_dict<GpuSampleFields>(x);
    dev["tree_pids"] = list_of(x.tree_pids, [](int pid) { return nb::int_(pid); });
    return dev;
  });
  return d;
}

sample::SamplerOptions make_options(double interval_s, int smaps_every, bool threads,
                                    size_t capacity, double smaps_budget_pct,
                                    double total_budget_pct = 0, bool gpus = false) {
  if (!(interval_s > 0) || interval_s > 3600) {
    throw Error("sampler interval_s must be between 0 and 3600 seconds");
  }
  sample::SamplerOptions o;
  o.interval_ns = int64_t(interval_s * 1e9);
  o.smaps_every = smaps_every;
  o.threads = threads;
  o.capacity = capacity;
  o.smaps_budget_pct = smaps_budget_pct;
  o.total_budget_pct = total_budget_pct;
  o.gpus = gpus;
  return o;
}

}  // namespace

nb::dict process_to_dict(const sample::ProcessSample& p) {
  nb::dict d = to_dict<ProcessIdFields>(p);
  d["state"] = state(p.state);
  d["comm"] = text(p.comm);
  d["num_threads"] = p.num_threads;
  d["active_threads"] = opt(p.active_threads);
  put_fields<ProcessUseFields>(d, p);
  d["smaps_fresh"] = p.smaps_fresh;
  put_fields<ProcessIoFields>(d, p);
  d["minor_faults_per_s"] = opt(p.minor_faults_per_s);
  d["major_faults_per_s"] = opt(p.major_faults_per_s);
  d["wchan"] = text(p.wchan);
  d["threads"] = list_of(p.threads, thread_to_dict);
  return d;
}

nb::dict snapshot_to_dict(const sample::Snapshot& s) {
  nb::dict d = to_dict<SnapshotClockFields>(s);
  d["machine"] = to_dict<MachineFields>(s.machine);
  d["gpu"] = gpu_to_dict(s.gpu);
  d["processes"] = list_of(s.processes, process_to_dict);
  return d;
}

void register_sample(nb::module_& m) {
  m.def(
      "top_cpu_users",
      [](double window_s, size_t count, double min_pct, const std::string& proc_root) {
        std::vector<sample::CpuUser> users;
        {
          nb::gil_scoped_release release;
          users = sample::top_cpu_users(proc_root, window_s, count, min_pct);
        }
        return list_of(users, [](const sample::CpuUser& u) { return to_dict<CpuUserFields>(u); });
      },
      nb::arg("window_s") = 1.0, nb::arg("count") = 5, nb::arg("min_pct") = 1.0,
      nb::arg("proc_root") = "/proc",
      "The processes that used the CPU most over the next window_s seconds (two readings of "
      "every /proc/<pid>/stat), most first: dicts of pid, comm, cmdline and cpu_pct (percent of "
      "one CPU); at most count, each with at least min_pct. Empty when /proc cannot be listed.");
  using sample::Sampler;
  nb::class_<Sampler>(m, "Sampler",
                      "Samples a process tree from /proc on its own thread (never holding the "
                      "GIL). Snapshots are dicts; unknown values are None.")
      .def(
          "__init__",
          [](Sampler* self, int root_pid, double interval_s, int smaps_every, bool threads,
             size_t capacity, double smaps_budget_pct, double total_budget_pct, bool gpus) {
            new (self) Sampler(root_pid, make_options(interval_s, smaps_every, threads, capacity,
                                                      smaps_budget_pct, total_budget_pct, gpus));
          },
          nb::arg("root_pid"), nb::arg("interval_s") = 0.1, nb::arg("smaps_every") = 10,
          nb::arg("threads") = false, nb::arg("capacity") = 600, nb::arg("smaps_budget_pct") = 0.05,
          nb::arg("total_budget_pct") = 0.0, nb::arg("gpus") = false)
      .def("add_root", &Sampler::add_root, nb::arg("pid"), "Also sample pid and its descendants.")
      .def("start", &Sampler::start, nb::call_guard<nb::gil_scoped_release>(),
           "Start the sampling thread (no-op when running).")
      .def("stop", &Sampler::stop, nb::call_guard<nb::gil_scoped_release>(),
           "Stop and join the sampling thread.")
      .def_prop_ro("running", &Sampler::running)
      .def(
          "sample_once",
          [](Sampler& self) {
            sample::Snapshot s;
            {
              nb::gil_scoped_release release;
              s = self.sample_once();
            }
            return snapshot_to_dict(s);
          },
          "Take one pass now and return it.")
      .def(
          "latest",
          [](const Sampler& self) -> nb::object {
            std::optional<sample::Snapshot> s;
            {
              nb::gil_scoped_release release;
              s = self.latest();
            }
            return s ? nb::object(snapshot_to_dict(*s)) : nb::none();
          },
          "The newest snapshot, or None before the first pass.")
      .def(
          "history",
          [](const Sampler& self, size_t max) {
            std::vector<sample::Snapshot> h;
            {
              nb::gil_scoped_release release;
              h = self.history(max);
            }
            nb::list out;
            for (const auto& s : h) out.append(snapshot_to_dict(s));
            return out;
          },
          nb::arg("max") = 0, "The newest max snapshots (all kept when 0), oldest first.")
      .def_prop_ro("samples_taken", &Sampler::samples_taken)
      .def_prop_ro("cost_ns_total", &Sampler::cost_ns_total)
      .def(
          "__enter__",
          [](Sampler& self) -> Sampler& {
            {
              nb::gil_scoped_release release;
              self.start();
            }
            return self;
          },
          nb::rv_policy::reference)
      .def(
          "__exit__",
          [](Sampler& self, nb::handle, nb::handle, nb::handle) {
            nb::gil_scoped_release release;
            self.stop();
          },
          nb::arg("exc_type").none(), nb::arg("exc").none(), nb::arg("tb").none());
}

}  // namespace dldoctor::ext
