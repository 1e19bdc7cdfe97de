// A running mean over the first 16 fetches, then a moving one (weight 1/16): it follows a
// loader that speeds up or slows down over minutes, and one straggler barely moves it.
#include "dldoctor_core/trace/slow_fetch.hpp"

#include <algorithm>

namespace dldoctor::trace {

bool SlowFetchDetector::observe(int64_t fetch_ns, uint64_t nth) noexcept {
  if (fetch_ns > cut_ns_) {
    if (records_left_ <= 0) return false;
    --records_left_;
    return true;
  }
  if (nth < kSlowFetchWarmup || (nth & 15) == 0) {
    const int64_t k = ++averaged_;
    mean_ns_ += (fetch_ns - mean_ns_) / (k < 16 ? k : 16);
    if (k >= 8) cut_ns_ = std::max(kSlowFetchFactor * mean_ns_, kSlowFetchMinNs);
  }
  return false;
}

}  // namespace dldoctor::trace
