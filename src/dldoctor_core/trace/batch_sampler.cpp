// xorshift64* for the sample: a few cycles, and random enough that a job which does something
// every N batches cannot line up with the measured ones (a fixed stride could).
#include "dldoctor_core/trace/batch_sampler.hpp"

#include <algorithm>
#include <cmath>

#include "dldoctor_core/common/clock.hpp"

namespace dldoctor::trace {
namespace {

uint32_t floor_pow2(int64_t n) {
  uint32_t p = 1;
  while (int64_t(p) * 2 <= n && p < kMaxSamplePeriod) p *= 2;
  return p;
}

}  // namespace

uint64_t BatchSampler::first_random(uint64_t seed, const void* at) noexcept {
  if (seed == 0) seed = uint64_t(now_ns()) ^ (uint64_t(reinterpret_cast<uintptr_t>(at)) << 16);
  return seed | 1;
}

void BatchSampler::reset(uint64_t seed) noexcept {
  *this = BatchSampler(seed, measured_per_second_, sample_above_per_second_);
}

void BatchSampler::resume(uint32_t period) noexcept { period_ = floor_pow2(int64_t(period)); }

uint64_t BatchSampler::next_random() noexcept {
  rng_ ^= rng_ >> 12;
  rng_ ^= rng_ << 25;
  rng_ ^= rng_ >> 27;
  return rng_ * 0x2545F4914F6CDD1Dull;
}

void BatchSampler::count_next(int64_t now_ns) noexcept {
  if (window_start_ns_ == 0) window_start_ns_ = last_count_ns_ = now_ns;
  ++window_fetches_;
  ++plan_fetches_;
  window_max_gap_ns_ = std::max(window_max_gap_ns_, now_ns - last_count_ns_);
  last_count_ns_ = now_ns;
  if (const int64_t dt = now_ns - window_start_ns_; dt >= kRateWindowNs) {
    // fetches/s over the window, divided by the measured rate wanted: the period.
    per_second_ = window_fetches_ * 1'000'000'000 / dt;
    const uint32_t wanted =
        per_second_ < sample_above_per_second_ ? 1 : floor_pow2(per_second_ / measured_per_second_);
    // A window that one gap fills more than half of may be a pause, not a slower stream (a
    // full garbage collection, the process preempted): the period falls by half at most, so
    // the next window is not measured in full. A stream that slowed to such gaps reaches its
    // period within log2(period) windows, and meanwhile kMaxUnmeasuredNs measures each fetch
    // after a gap; a stream that slowed down evenly reaches it at once.
    period_ = 2 * window_max_gap_ns_ > dt ? std::max(wanted, period_ / 2) : wanted;
    window_start_ns_ = now_ns;
    window_fetches_ = 0;
    window_max_gap_ns_ = 0;
  }
}

bool BatchSampler::decide(int64_t now_ns) noexcept {
  count_next(now_ns);
  return period_ == 1 || unmeasured_ + 1 >= kMaxWeight ||
         now_ns - last_measured_ns_ >= kMaxUnmeasuredNs ||
         (next_random() >> 32 & (period_ - 1)) == 0;
}

uint32_t BatchSampler::plan(int64_t now_ns) noexcept {
  // The rate since the previous plan: the fetches of its run and the measured one after it.
  const int64_t since = last_plan_ns_ != 0 ? now_ns - last_plan_ns_ : 0;
  const int64_t recent = plan_fetches_;
  plan_fetches_ = 0;
  count_next(now_ns);  // the next fetch: the first of those the next plan() looks back on
  last_plan_ns_ = now_ns;
  if (period_ == 1) return 0;
  // Fetches before the first one a Bernoulli(1 / period) sample picks: floor(log(u) /
  // log(1 - 1/period)) for u uniform in (0, 1].
  const double u = double((next_random() >> 11) + 1) * 0x1.0p-53;
  const double gap = std::floor(std::log(u) / std::log1p(-1.0 / double(period_)));
  // What decide() would stop at: the weight's limit, and kMaxUnmeasuredNs at the last rate
  // (before a first full window: one period).
  int64_t rate = per_second_;
  if (since > 0 && recent > 0) {
    const int64_t recent_rate = recent * 1'000'000'000 / since;
    rate = rate > 0 ? std::min(rate, recent_rate) : recent_rate;
  }
  int64_t most = rate > 0 ? rate * kMaxUnmeasuredNs / 1'000'000'000 : period_;
  most = std::min<int64_t>(most, int64_t(kMaxWeight) - 2 - int64_t(unmeasured_));
  if (most <= 0) return 0;
  return gap >= double(most) ? uint32_t(most) : uint32_t(gap);
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
