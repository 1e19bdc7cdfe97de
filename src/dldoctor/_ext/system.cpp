// Glue for dldoctor_core/system: facts as plain nested dicts, None for unknown.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include "dldoctor_core/system/collect.hpp"
#include "dldoctor_core/system/storage.hpp"
#include "optional.hpp"
#include "register.hpp"
#include "system_convert.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {

namespace {

DLDOCTOR_FIELDS(GpuFields, measured, not_measured, driver_version);
DLDOCTOR_FIELDS(GpuDeviceFields, index, name, uuid, memory_total_bytes, memory_used_bytes,
                utilization_pct);

nb::dict gpu_to_dict(const system::GpuFacts& g) {
  nb::dict d = to_dict<GpuFields>(g);
  d["devices"] =
      list_of(g.devices, [](const system::GpuDevice& x) { return to_dict<GpuDeviceFields>(x); });
  d["device_errors"] =
      list_of(g.device_errors, [](const std::string& e) { return nb::str(e.c_str()); });
  return d;
}

}  // namespace

nb::dict facts_to_dict(const system::Facts& f) {
  nb::dict d;
  d["cpu"] = to_dict<CpuFields>(f.cpu);
  d["memory"] = to_dict<MemoryFields>(f.memory);
  d["shm"] = to_dict<ShmFields>(f.shm);
  d["limits"] = to_dict<LimitFields>(f.limits);
  nb::dict container;
  container["in_container"] = opt(f.in_container);
  container["kind"] = f.container_kind;
  d["container"] = container;
  nb::dict pressure;
  pressure["cpu_some_avg10"] = opt(f.cpu_pressure_some_avg10);
  pressure["io_some_avg10"] = opt(f.io_pressure_some_avg10);
  pressure["memory_some_avg10"] = opt(f.mem_pressure_some_avg10);
  d["pressure"] = pressure;
  d["cgroup_version"] = f.cgroup_version;
  d["gpu"] = gpu_to_dict(f.gpu);
  return d;
}

void register_system(nb::module_& m) {
  m.def(
      "collect_facts",
      [](const std::string& shm_path, const std::string& proc_root, const std::string& sys_root,
         const std::string& root) {
        system::CollectOptions o{shm_path, proc_root, sys_root, root};
        system::Facts f;
        {
          nb::gil_scoped_release release;
          f = system::collect(o);
        }
        return facts_to_dict(f);
      },
      nb::arg("shm_path") = "/dev/shm", nb::arg("proc_root") = "/proc",
      nb::arg("sys_root") = "/sys", nb::arg("root") = "/",
      "Facts about this process's machine as nested dicts (cpu, memory, shm, limits, container, "
      "pressure); None where a source could not be read. The roots are for tests.");
  m.def(
      "probe_storage",
      [](const std::string& path, double max_seconds, int64_t max_files) {
        system::StorageFacts s;
        {
          nb::gil_scoped_release release;
          s = system::probe_storage(path, max_seconds, max_files);
        }
        return to_dict<StorageFields>(s);
      },
      nb::arg("path"), nb::arg("max_seconds") = 2.0, nb::arg("max_files") = 100000,
      "The storage behind a data directory: filesystem, disk, a bounded file count and a "
      "page-cache-bypassing read probe. Raises CoreError when the path is missing.");
}

}  // namespace dldoctor::ext
