// fd_limit: under torch's default file_descriptor sharing strategy every tensor storage in
// flight is an open descriptor, in the worker that made it and in the main process that
// receives it. A loader passing many tensors per batch runs into RLIMIT_NOFILE: a worker
// cannot send its batch ("Too many open files", printed, the batch lost, the main process
// waiting forever) or the main process cannot receive one ("received 0 items of
// ancdata"). Confirmed by that text, predicted by descriptor counts near the limit.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze {

/// The smallest limit worth prescribing: the one `dldoctor check` asks for, room for a
/// detection-style loader (64 samples x 3 tensors x 4 workers x prefetch 2 = 1536 fds)
/// beside the dataset's own files.
inline constexpr int64_t kFdRecommendedMin = 8192;

}  // namespace dldoctor::analyze

namespace dldoctor::analyze::fd_limit {

/// A job process with this share of RLIMIT_NOFILE open is one burst of batches away from
/// the limit: the count moves with the batches in flight, and the sampler reads it only
/// every few seconds, between the peaks.
inline constexpr double kFdNearLimitFraction = 0.8;

/// Headroom of the prescribed limit over the most descriptors seen at once.
inline constexpr int64_t kFdHeadroom = 4;

/// Score of the warning near the limit: a failure to come ranks with a bottleneck that
/// explains most of the stall (a share of 0.8), above a lesser one.
inline constexpr double kNearLimitScore = 0.8;

struct Evidence {
  report::Rank rank;
  int loader = -1;
  int pid = 0;                          ///< the process that ran out (or is nearest), 0 unknown
  bool own_limit = false;               ///< soft/hard are that process's own (else inherited)
  std::optional<int64_t> soft, hard;    ///< its RLIMIT_NOFILE (empty soft: unlimited)
  std::optional<int64_t> started_soft;  ///< the job's starting limit, when higher than soft
  std::string strategy;                 ///< torch's sharing strategy, "" unknown
  bool fd_strategy = true;              ///< file_descriptor (or unknown: torch's default)
  std::optional<int64_t> peak;          ///< most descriptors a job process held, as sampled
  int peak_pid = 0;
  bool failed = false;  ///< "Too many open files" passing batches
  std::string error;    ///< the line of the error text that names it
  int64_t errors = 0;
  int64_t lost = 0;         ///< batches a worker could not send
  int64_t recommended = 0;  ///< the limit to set
  /// In a job of several main processes (ranks) on the node: the rank of the process that
  /// ran out or is nearest (-1 unknown), and each rank's descriptors (its main process's and
  /// workers' peaks, summed). RLIMIT_NOFILE is per process, so every process of every rank
  /// is judged against its own limit; the sums say where the node's descriptors are.
  int process_rank = -1;
  std::vector<std::pair<std::string, int64_t>> fds_per_rank;
};
std::optional<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::fd_limit
