#include "dldoctor_core/system/cpu.hpp"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <set>
#include <tuple>
#include <utility>

#include "dldoctor_core/system/file.hpp"

namespace dldoctor::system {

std::optional<std::vector<int>> affinity_cpus() {
  // The kernel rejects a mask smaller than its nr_cpu_ids with EINVAL: grow until it fits.
  for (int ncpus = 1024; ncpus <= (1 << 20); ncpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(ncpus);
    if (!set) return std::nullopt;
    size_t size = CPU_ALLOC_SIZE(ncpus);
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      std::vector<int> cpus;
      for (int i = 0; i < ncpus; ++i)
        if (CPU_ISSET_S(i, size, set)) cpus.push_back(i);
      CPU_FREE(set);
      return cpus;
    }
    int err = errno;
    CPU_FREE(set);
    if (err != EINVAL) return std::nullopt;
  }
  return std::nullopt;
}

std::pair<std::optional<double>, std::string> cgroup_cpu_quota(const Cgroups& cgroups) {
  std::optional<double> best;
  std::string source;
  auto consider = [&](std::optional<double> q, const std::string& file) {
    if (q && (!best || *q < *best)) {
      best = q;
      source = file;
    }
  };
  for (const auto& dir : cgroups.chain("cpu")) {
    auto quota_file = join_path(dir, "cpu.cfs_quota_us");
    consider(cfs_quota_cpus(read_int(quota_file), read_int(join_path(dir, "cpu.cfs_period_us"))),
             quota_file);
  }
  for (const auto& dir : cgroups.chain("")) {
    auto file = join_path(dir, "cpu.max");
    if (auto text = read_file(file)) consider(parse_cpu_max(*text), file);
  }
  return {best, source};
}

std::optional<int> count_physical_cores(const std::vector<int>& cpus, const std::string& sys_root) {
  if (cpus.empty()) return std::nullopt;
  std::set<std::pair<int64_t, int64_t>> cores;
  for (int cpu : cpus) {
    auto topo = join_path(sys_root, "devices/system/cpu/cpu" + std::to_string(cpu) + "/topology");
    auto core = read_int(join_path(topo, "core_id"));
    auto package = read_int(join_path(topo, "physical_package_id"));
    if (!core || !package) return std::nullopt;
    cores.emplace(*package, *core);
  }
  return static_cast<int>(cores.size());
}

std::optional<double> usable_cpus(std::optional<int> affinity, std::optional<double> quota,
                                  std::optional<int> online) noexcept {
  std::optional<double> cpus;
  if (affinity) cpus = *affinity;
  else if (online) cpus = *online;
  if (quota) cpus = cpus ? std::min(*cpus, *quota) : *quota;
  return cpus;
}

CpuFacts read_cpu(const Cgroups& cgroups, const std::string& sys_root) {
  CpuFacts f;
  long online = sysconf(_SC_NPROCESSORS_ONLN);
  if (online > 0) f.online = static_cast<int>(online);
  auto cpus = affinity_cpus();
  if (cpus && !cpus->empty()) {
    f.affinity = static_cast<int>(cpus->size());
    f.physical_cores = count_physical_cores(*cpus, sys_root);
  }
  std::tie(f.cgroup_quota, f.quota_source) = cgroup_cpu_quota(cgroups);
  f.usable = usable_cpus(f.affinity, f.cgroup_quota, f.online);
  return f;
}

}  // namespace dldoctor::system
