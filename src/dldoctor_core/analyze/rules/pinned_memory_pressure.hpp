// pinned_memory_pressure (seed cause 5): the job runs short of memory while a loader has
// pin_memory on: the pinned copies of the batches in flight are locked in RAM and cannot be
// reclaimed, so they are the part to give back first. Also says (info) when pin_memory=True
// does nothing because there is no accelerator to pin for.
#pragma once

#include <optional>
#include <vector>

#include "dldoctor_core/analyze/memory.hpp"

namespace dldoctor::analyze::pinned_memory_pressure {

/// Batches the main process holds pinned beside the workers' queues: the one in use.
inline constexpr int kPinnedHeldBatches = 1;

/// pin_memory=True on a machine without an accelerator (torch skips pinning).
struct Unused {
  int loader = -1;
};
std::optional<Unused> detect_unused(const JobView& job);
report::Finding finding(const Unused& e);

/// Memory is short and pinned batches hold part of it.
struct Evidence {
  report::Rank rank;
  Memory memory;
  int loader = -1;  ///< the pinned loader when there is one, else -1
  int pinned_loaders = 0;
  std::optional<double> pinned_bytes;  ///< estimate over the pinned loaders
  std::optional<double> batch_bytes;   ///< of the largest pinned loader
  int num_workers = 0;                 ///< of the largest pinned loader
  std::optional<int> prefetch_factor;  ///< of the largest pinned loader, when set
};
std::optional<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::pinned_memory_pressure
