// shm_exhausted (seed cause 3): workers hand every batch to the main process through
// /dev/shm. When the batches in flight do not fit, the collate or the send fails ("No space
// left on device") or the worker dies of SIGBUS touching a page the tmpfs cannot back; a
// batch lost in the send leaves the main process waiting forever. Predicted from the batch
// bytes and the queue depths before it happens, confirmed by the failure when it does. The
// fix names the size, worded for the machine's kind (Docker, Kubernetes, bare metal) by the
// same function `dldoctor check` uses.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze {

/// /dev/shm should hold this many times the batches in flight (the same margin as
/// `dldoctor check`): batch sizes vary (variable-length samples, the last batch), the
/// consumer's previous batch is freed only after the next one arrives, and NCCL and other
/// processes on the node keep their own segments there.
inline constexpr double kShmMargin = 2.0;

/// The fix for a /dev/shm that must hold `in_flight_bytes` (with kShmMargin), as `dldoctor
/// check` words it: the size in whole GiB, then the commands for Docker, Kubernetes and bare
/// metal, the machine's own kind (`container_kind`: "docker", "kubernetes", "podman", "")
/// first, then fewer batches in flight; one line each.
std::string shm_fix(const std::string& container_kind, double in_flight_bytes);

}  // namespace dldoctor::analyze

namespace dldoctor::analyze::shm_exhausted {

/// Batches the main process holds in /dev/shm beside the workers' queues: the one the
/// consumer trains on (its segments are unmapped only when it is dropped).
inline constexpr int kConsumerHeldBatches = 1;

/// /dev/shm used at this share of its size, as the sampler saw it, is full in practice:
/// the next batch of a prefetching worker needs room at once.
inline constexpr double kShmFullFraction = 0.9;

/// Scores of the warnings: batches that will not fit rank with a bottleneck that explains
/// the whole stall, a thin margin with one that explains half of it.
inline constexpr double kPredictedOverflowScore = 1.0;
inline constexpr double kThinMarginScore = 0.5;

/// The batches one loader keeps in /dev/shm.
struct InFlight {
  double batch_bytes = 0;
  int workers = 0;
  int prefetch = kDefaultPrefetchFactor;
  bool prefetch_known = false;
  std::optional<int> batch_size;  ///< samples per batch, when known
  int batches() const noexcept { return workers * prefetch + kConsumerHeldBatches; }
  double bytes() const noexcept { return batch_bytes * batches(); }
  double bytes_with(int w, int p) const noexcept {
    return batch_bytes * (w * p + kConsumerHeldBatches);
  }
};

/// A failure on /dev/shm: an error text, or a death by SIGBUS.
struct Failure {
  std::string text;  ///< the error text, or the death's description
  int loader = -1;
  bool sigbus = false;
  int64_t lost = 0;  ///< batches a worker could not send (the main process waits for them)
};

struct Evidence {
  report::Rank rank;
  int loader = -1;
  std::vector<Failure> failures;      ///< empty: a prediction, or use seen near full
  std::optional<InFlight> in_flight;  ///< of the loader the fix is sized from
  /// What the node's main processes hold at once: each one's largest loader (a process's
  /// loaders take turns), summed over the ranks, which all run at once on this /dev/shm.
  /// Equal to in_flight's for a job of one main process.
  double in_flight_total = 0;
  int64_t batches_total = 0;
  /// Each rank's bytes in flight ("rank 0", bytes), when more than one main process holds
  /// some: the finding is then the node's, and a setting that fits is for each rank's loader.
  std::vector<std::pair<std::string, double>> rank_in_flight;
  std::optional<double> free_bytes;
  std::optional<int64_t> total_bytes, used_peak_bytes;
  bool predicted_over = false;  ///< the batches in flight exceed what is free
  bool thin_margin = false;     ///< they fit, but not kShmMargin times over
  double need_bytes = 0;        ///< what must fit (0 unknown)
  std::string fits_today;       ///< a smaller setting that fits today's size, "" none
  std::string container_kind;   ///< for the wording of the fix
};
std::optional<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::shm_exhausted
