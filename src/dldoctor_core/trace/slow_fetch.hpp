// Notices the fetches of one stream that take far longer than its running mean, so the job
// can report their sample indices (straggler_worker names them). Sees every fetch, measured
// or not: a rare straggler in a fast, sampled stream is still caught.
#pragma once

#include <cstdint>

namespace dldoctor::trace {

/// A fetch is slow past this many times the stream's mean ...
inline constexpr int64_t kSlowFetchFactor = 5;
/// ... and this long: shorter ones cannot hold a loop up enough to matter.
inline constexpr int64_t kSlowFetchMinNs = 10'000'000;
/// The mean follows every fetch of the first kSlowFetchWarmup, then every 16th (a tiny-batch
/// stream pays for it on one fetch in 16).
inline constexpr uint64_t kSlowFetchWarmup = 64;
/// Slow fetches reported per stream at most.
inline constexpr int kSlowFetchMaxRecords = 256;

class SlowFetchDetector {
 public:
  /// The `nth` fetch of the stream (1-based) took `fetch_ns`. True: it is slow and one of
  /// the first kSlowFetchMaxRecords such, so a record is due.
  bool observe(int64_t fetch_ns, uint64_t nth) noexcept;
  /// The running mean the cut is taken from (0 until the first fetches).
  int64_t mean_ns() const noexcept { return mean_ns_; }
  /// Fetches above this are slow (huge until 8 fetches were averaged).
  int64_t cut_ns() const noexcept { return cut_ns_; }
  void reset() noexcept { *this = SlowFetchDetector{}; }

 private:
  int64_t cut_ns_ = int64_t{1} << 62;
  int64_t mean_ns_ = 0;
  int64_t averaged_ = 0;
  int records_left_ = kSlowFetchMaxRecords;
};

}  // namespace dldoctor::trace
