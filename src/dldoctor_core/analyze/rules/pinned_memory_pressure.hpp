// pinned_memory_pressure (seed cause 5): the job runs short of memory while a loader has
// pin_memory on: the pinned copies of the batches in flight are locked in RAM and cannot be
// reclaimed, so they are the part to give back first. Also says (info) when pin_memory=True
// does nothing because there is no accelerator to pin for.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dldoctor_core/analyze/memory.hpp"

namespace dldoctor::analyze::pinned_memory_pressure {

/// Batches the main process holds pinned beside the workers' queues: the one in use.
inline constexpr int kPinnedHeldBatches = 1;

/// Pinned bytes below this share of the memory the job may use (its cgroup's limit, else
/// MemTotal) are not why memory is short: giving every one of them back would not end the
/// shortage, so the finding is ram_pressure's, which looks for what holds the rest.
inline constexpr double kPinnedMinShare = 0.05;

/// The batches pinned loaders hold in page-locked memory.
struct Pinned {
  int loaders = 0;                      ///< loaders with pin_memory=True in the window
  const LoaderView* largest = nullptr;  ///< by batch bytes
  /// Measured: (the most batches finished and not yet taken, at a hand-out, + the one in use)
  /// x the mean batch bytes, summed over the pinned loaders (empty when not measured).
  std::optional<double> bytes_in_flight;
  std::optional<int64_t> batches_in_flight;  ///< the most of them, all pinned loaders
  /// The configuration's bound: (num_workers x prefetch_factor + the one in use) x bytes.
  std::optional<double> bytes_estimate;
  /// bytes_in_flight (else the estimate) / the memory the job may use; empty when unknown.
  std::optional<double> share;
  /// Each rank's pinned bytes (measured, else its estimate) when more than one main process
  /// of the node pins: they all lock the node's one RAM, so the share above is theirs together.
  std::vector<std::pair<std::string, double>> per_rank;
  /// Pinned memory counts among the causes: at least kPinnedMinShare, or not known to be less.
  bool matters() const noexcept { return loaders > 0 && (!share || *share >= kPinnedMinShare); }
};
/// Empty when no loader of the window has pin_memory=True.
std::optional<Pinned> pinned(const JobView& job, const Memory& m);

/// pin_memory=True on a machine without an accelerator (torch skips pinning).
struct Unused {
  int loader = -1;
};
std::optional<Unused> detect_unused(const JobView& job);
report::Finding finding(const Unused& e);

/// Memory is short and pinned batches hold a share of it that matters.
struct Evidence {
  report::Rank rank;
  Memory memory;
  int loader = -1;  ///< the pinned loader when there is one, else -1
  int pinned_loaders = 0;
  std::optional<double> pinned_bytes;               ///< estimate over the pinned loaders
  std::optional<double> pinned_bytes_in_flight;     ///< measured (Pinned::bytes_in_flight)
  std::optional<int64_t> pinned_batches_in_flight;  ///< measured, the most at once
  std::optional<double> pinned_share;               ///< of the memory the job may use
  std::optional<double> batch_bytes;                ///< of the largest pinned loader
  int num_workers = 0;                              ///< of the largest pinned loader
  std::optional<int> prefetch_factor;               ///< of the largest pinned loader, when set
  std::vector<std::pair<std::string, double>> per_rank;  ///< Pinned::per_rank
};
/// Empty unless memory is short and Pinned::matters() (else ram_pressure speaks).
std::optional<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::pinned_memory_pressure
