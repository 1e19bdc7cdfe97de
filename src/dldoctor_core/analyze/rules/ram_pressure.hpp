// ram_pressure: the job runs short of memory (MemAvailable, the memory cgroup's headroom,
// swap, PSI) and no pin_memory loader is the cause: the workers' own memory is what to give
// back.
#pragma once

#include <optional>
#include <vector>

#include "dldoctor_core/analyze/memory.hpp"

namespace dldoctor::analyze::ram_pressure {

struct Evidence {
  report::Rank rank;
  Memory memory;
};
/// Memory is short and no loader pins its batches (else pinned_memory_pressure).
std::optional<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::ram_pressure
