// xorshift64* for the sample: a few cycles, and random enough that a job which does something
// every N batches cannot line up with the measured ones (a fixed stride could).
#include "dldoctor_core/trace/batch_sampler.hpp"

#include <algorithm>

#include "dldoctor_core/common/clock.hpp"

namespace dldoctor::trace {
namespace {

uint32_t floor_pow2(int64_t n) {
  uint32_t p = 1;
  while (int64_t(p) * 2 <= n && p < kMaxSamplePeriod) p *= 2;
  return p;
}

}  // namespace

void BatchSampler::reset(uint64_t seed) noexcept {
  if (seed == 0) seed = uint64_t(now_ns()) ^ (uint64_t(reinterpret_cast<uintptr_t>(this)) << 16);
  rng_ = seed | 1;
  period_ = 1;
  weight_ = 1;
  unmeasured_ = 0;
  measured_ = 0;
  last_measured_ns_ = 0;
  window_start_ns_ = 0;
  window_fetches_ = 0;
}

void BatchSampler::resume(uint32_t period) noexcept { period_ = floor_pow2(int64_t(period)); }

uint64_t BatchSampler::next_random() noexcept {
  rng_ ^= rng_ >> 12;
  rng_ ^= rng_ << 25;
  rng_ ^= rng_ >> 27;
  return rng_ * 0x2545F4914F6CDD1Dull;
}

bool BatchSampler::decide(int64_t now_ns) noexcept {
  if (window_start_ns_ == 0) window_start_ns_ = now_ns;
  ++window_fetches_;
  if (const int64_t dt = now_ns - window_start_ns_; dt >= kRateWindowNs) {
    // fetches/s over the window, divided by the measured rate wanted: the period.
    const int64_t per_second = window_fetches_ * 1'000'000'000 / dt;
    period_ = per_second < kSampleAbovePerSecond ? 1 : floor_pow2(per_second / kMeasuredPerSecond);
    window_start_ns_ = now_ns;
    window_fetches_ = 0;
  }
  return period_ == 1 || unmeasured_ + 1 >= kMaxWeight ||
         now_ns - last_measured_ns_ >= kMaxUnmeasuredNs ||
         (next_random() >> 32 & (period_ - 1)) == 0;
}

bool BatchSampler::record(bool sampled, bool force, int64_t now_ns) noexcept {
  if (sampled) {
    weight_ = unmeasured_ + 1;
    unmeasured_ = 0;
    ++measured_;
    last_measured_ns_ = now_ns;
    return true;
  }
  if (force) {
    // Measured outside the random sample: it stands for itself alone, and the fetches
    // skipped so far still wait for the next sampled one, so the sample stays unbiased.
    weight_ = 1;
    ++measured_;
    return true;
  }
  ++unmeasured_;
  return false;
}

uint32_t BatchSampler::take_unmeasured() noexcept {
  const uint32_t n = unmeasured_;
  unmeasured_ = 0;
  return n;
}

}  // namespace dldoctor::trace
