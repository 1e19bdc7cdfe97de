#include "dldoctor_core/system/collect.hpp"

#include <cstdlib>

#include "dldoctor_core/system/cgroup.hpp"
#include "dldoctor_core/system/container.hpp"
#include "dldoctor_core/system/cpu.hpp"
#include "dldoctor_core/system/gpu.hpp"
#include "dldoctor_core/system/limits.hpp"
#include "dldoctor_core/system/memory.hpp"
#include "dldoctor_core/system/pressure.hpp"
#include "dldoctor_core/system/shm.hpp"

namespace dldoctor::system {

Facts collect(const CollectOptions& options) {
  Facts f;
  auto cgroups = Cgroups::read(options.proc_root);
  f.cgroup_version = cgroups.version();
  f.cpu = read_cpu(cgroups, options.sys_root);
  f.memory = read_memory(options.proc_root, cgroups);
  f.shm = read_shm(options.shm_path, cgroups.mounts());
  f.limits = read_limits(options.proc_root);
  auto container =
      detect_container(options.root, options.proc_root, std::getenv("KUBERNETES_SERVICE_HOST"));
  f.in_container = container.in_container;
  f.container_kind = container.kind;
  f.cpu_pressure_some_avg10 = read_pressure(options.proc_root, "cpu");
  f.io_pressure_some_avg10 = read_pressure(options.proc_root, "io");
  f.mem_pressure_some_avg10 = read_pressure(options.proc_root, "memory");
  if (options.gpus)
    f.gpu = read_gpus(Nvml::shared());
  else
    f.gpu.not_measured = "not read (GPU listing turned off)";
  return f;
}

}  // namespace dldoctor::system
