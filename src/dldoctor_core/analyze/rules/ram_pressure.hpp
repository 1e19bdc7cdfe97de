// ram_pressure: the job runs short of memory (MemAvailable, the memory cgroup's headroom,
// swap, PSI) and no pin_memory loader is the cause: the workers' own memory is what to give
// back.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dldoctor_core/analyze/memory.hpp"

namespace dldoctor::analyze::ram_pressure {

struct Evidence {
  report::Rank rank;
  Memory memory;
  /// Resident memory each rank's processes held (its main process and its loaders' workers,
  /// each one's peak, summed), when more than one main process shares the node's RAM.
  std::vector<std::pair<std::string, double>> rss_per_rank;
};
/// Each main process's resident memory with its workers (node_share's grouping); empty
/// unless more than one of them was measured.
std::vector<std::pair<std::string, double>> rss_per_rank(const JobView& job);
/// Memory is short and no loader pins its batches (else pinned_memory_pressure).
std::optional<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::ram_pressure
