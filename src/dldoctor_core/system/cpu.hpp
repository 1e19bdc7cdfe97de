// Usable CPUs: the affinity mask, the cgroup CPU quota, and physical cores from sysfs.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/system/cgroup.hpp"
#include "dldoctor_core/system/facts.hpp"

namespace dldoctor::system {

/// The CPUs this process may run on (sched_getaffinity); empty when the call fails.
std::optional<std::vector<int>> affinity_cpus();

/// The tightest CPU quota on the way from this process's cgroup to the root, in CPUs, and the
/// file it came from; {nullopt, ""} when no level sets one.
std::pair<std::optional<double>, std::string> cgroup_cpu_quota(const Cgroups& cgroups);

/// Distinct (package, core) pairs among `cpus`, from `<sys_root>/devices/system/cpu/cpuN/topology`;
/// empty when any of them cannot be read.
std::optional<int> count_physical_cores(const std::vector<int>& cpus, const std::string& sys_root);

/// min(affinity, quota); falls back to online CPUs when the affinity is unknown.
std::optional<double> usable_cpus(std::optional<int> affinity, std::optional<double> quota,
                                  std::optional<int> online) noexcept;

/// All CPU facts of this process.
CpuFacts read_cpu(const Cgroups& cgroups, const std::string& sys_root);

}  // namespace dldoctor::system
