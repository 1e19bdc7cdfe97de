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

nb::dict to_dict(const system::CpuFacts& c) {
  nb::dict d;
  d["online"] = opt(c.online);
  d["affinity"] = opt(c.affinity);
  d["cgroup_quota"] = opt(c.cgroup_quota);
  d["physical_cores"] = opt(c.physical_cores);
  d["usable"] = opt(c.usable);
  d["quota_source"] = c.quota_source;
  return d;
}

nb::dict to_dict(const system::MemoryFacts& m) {
  nb::dict d;
  d["total_bytes"] = opt(m.total_bytes);
  d["available_bytes"] = opt(m.available_bytes);
  d["swap_total_bytes"] = opt(m.swap_total_bytes);
  d["swap_free_bytes"] = opt(m.swap_free_bytes);
  d["cgroup_limit_bytes"] = opt(m.cgroup_limit_bytes);
  d["cgroup_usage_bytes"] = opt(m.cgroup_usage_bytes);
  d["cgroup_working_set_bytes"] = opt(m.cgroup_working_set_bytes);
  d["cgroup_source"] = m.cgroup_source;
  return d;
}

nb::dict to_dict(const system::ShmFacts& s) {
  nb::dict d;
  d["path"] = s.path;
  d["total_bytes"] = opt(s.total_bytes);
  d["free_bytes"] = opt(s.free_bytes);
  d["fs_type"] = s.fs_type;
  d["options"] = s.options;
  return d;
}

nb::dict to_dict(const system::LimitFacts& l) {
  nb::dict d;
  d["nofile_soft"] = opt(l.nofile_soft);
  d["nofile_hard"] = opt(l.nofile_hard);
  d["memlock_soft"] = opt(l.memlock_soft);
  d["memlock_hard"] = opt(l.memlock_hard);
  d["open_fds"] = opt(l.open_fds);
  return d;
}

nb::dict to_dict(const system::GpuFacts& g) {
  nb::dict d;
  d["measured"] = g.measured;
  d["not_measured"] = g.not_measured;
  d["driver_version"] = g.driver_version;
  d["devices"] = list_of(g.devices, [](const system::GpuDevice& x) {
    nb::dict dev;
    dev["index"] = x.index;
    dev["name"] = x.name;
    dev["uuid"] = x.uuid;
    dev["memory_total_bytes"] = opt(x.memory_total_bytes);
    dev["memory_used_bytes"] = opt(x.memory_used_bytes);
    dev["utilization_pct"] = opt(x.utilization_pct);
    return dev;
  });
  d["device_errors"] =
      list_of(g.device_errors, [](const std::string& e) { return nb::str(e.c_str()); });
  return d;
}

}  // namespace

nb::dict facts_to_dict(const system::Facts& f) {
  nb::dict d;
  d["cpu"] = to_dict(f.cpu);
  d["memory"] = to_dict(f.memory);
  d["shm"] = to_dict(f.shm);
  d["limits"] = to_dict(f.limits);
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
  d["gpu"] = to_dict(f.gpu);
  return d;
}

namespace {

nb::dict to_dict(const system::StorageFacts& s) {
  nb::dict d;
  d["path"] = s.path;
  d["mount_point"] = s.mount_point;
  d["fs_type"] = s.fs_type;
  d["source"] = s.source;
  d["network_fs"] = s.network_fs;
  d["block_device"] = s.block_device;
  d["device_numbers"] = s.device_numbers;
  d["rotational"] = opt(s.rotational);
  d["files"] = opt(s.files);
  d["bytes"] = opt(s.bytes);
  d["count_truncated"] = s.count_truncated;
  d["read_mb_s"] = opt(s.read_mb_s);
  d["probe_bytes"] = opt(s.probe_bytes);
  d["probe_cached"] = s.probe_cached;
  return d;
}

}  // namespace

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
        return to_dict(s);
      },
      nb::arg("path"), nb::arg("max_seconds") = 2.0, nb::arg("max_files") = 100000,
      "The storage behind a data directory: filesystem, disk, a bounded file count and a "
      "page-cache-bypassing read probe. Raises CoreError when the path is missing.");
}

}  // namespace dldoctor::ext
