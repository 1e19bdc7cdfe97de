// Memory: /proc/meminfo for the machine, the cgroup memory controller for the container.
#pragma once

#include <string>
#include <string_view>

#include "dldoctor_core/system/cgroup.hpp"
#include "dldoctor_core/system/facts.hpp"

namespace dldoctor::system {

/// MemTotal, MemAvailable, SwapTotal and SwapFree of a /proc/meminfo text, in bytes; the
/// cgroup fields are left empty.
MemoryFacts parse_meminfo(std::string_view text);

/// Fills the cgroup fields of `facts` from the level of the cgroup tree with the least headroom
/// (limit - usage): that is the limit the OOM killer will enforce first.
void read_cgroup_memory(const Cgroups& cgroups, MemoryFacts& facts);

/// All memory facts: `<proc_root>/meminfo` and the memory cgroup.
MemoryFacts read_memory(const std::string& proc_root, const Cgroups& cgroups);

}  // namespace dldoctor::system
