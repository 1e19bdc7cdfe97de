// Which batches of one stream (one worker's fetches, or a single-process iterator's hand-outs)
// are measured in full and written to the ring. A stream slower than kSampleAbovePerSecond fetches
// a second has every fetch measured; a faster one a random sample of about kMeasuredPerSecond a
// second (or the rate its sampler was made with), each event standing for the fetches since the
// previous one (Event::weight), so batch counts stay exact and weighted sums unbiased. Chosen
// before a fetch runs, never by its duration: one at a time (decide) or a run at a time (plan).
#pragma once

#include <cstdint>

namespace dldoctor::trace {

/// Measured fetches per second a fast stream keeps (250 to 500: the period is a power of two):
/// thousands of fetches in a rule's 10 s window describe a distribution as well as hundreds of
/// thousands. Each measured one costs the job microseconds that the others do not: a tiny-batch
/// loop kept 0.967 of its throughput at 1,000-2,000 a second, 0.975 at 250-500
/// (bench/hooks_ab.py).
inline constexpr int64_t kMeasuredPerSecond = 250;
/// Below this rate every fetch is measured; above it, about kMeasuredPerSecond a second.
/// Loaders whose batches take 2 ms or more never sample. Each event is also the watcher's
/// work (the drain, the analyzer): a tiny-batch loader with 2 workers at ~1,100 fetches a
/// second each wrote every one, ~2,400 events a second, a third of the watcher's CPU; a
/// sample of 250-500 a second per stream describes a rule's 10 s window as well.
inline constexpr int64_t kSampleAbovePerSecond = 500;
/// The rate is estimated over windows this long; the period follows within one window, but
/// falls by half at most after a window that one gap filled (a pause is not a slower stream).
inline constexpr int64_t kRateWindowNs = 100'000'000;
/// While fetches keep coming, one is measured at least this often whatever the period: when
/// a fast stream slows down, its events resume within tens of milliseconds, not after
/// `period` more fetches.
inline constexpr int64_t kMaxUnmeasuredNs = 20'000'000;
/// Largest period (one fetch in this many measured): a stream of 4 M fetches/s.
inline constexpr uint32_t kMaxSamplePeriod = 4096;
/// An event's weight is a uint16: the stream measures a fetch before the count overflows.
inline constexpr uint32_t kMaxWeight = 65535;

/// The per-stream decision; one object per stream, used by one thread at a time. `now_ns`
/// may come from a coarse clock (CLOCK_MONOTONIC_COARSE, a few ms resolution): it only sets
/// the rate windows and the gap between measured fetches.
class BatchSampler {
 public:
  /// `measured_per_second`: what a fast stream keeps (kMeasuredPerSecond unless its measured
  /// fetches cost more where they run).
  /// `sample_above_per_second`: the rate below which every fetch is measured
  /// (kSampleAbovePerSecond unless the stream's events matter less one by one).
  explicit BatchSampler(uint64_t seed = 0, int64_t measured_per_second = kMeasuredPerSecond,
                        int64_t sample_above_per_second = kSampleAbovePerSecond) noexcept
      : measured_per_second_(measured_per_second > 0 ? measured_per_second : 1),
        sample_above_per_second_(sample_above_per_second),
        rng_(first_random(seed, this)) {}

  /// A fetch of this stream starts at `now_ns`. True: measure it (its event stands for
  /// weight() fetches). `force`: measure it whatever the sample says (a profiled fetch);
  /// one the sample did not pick then stands for itself alone (weight 1).
  bool take(int64_t now_ns, bool force = false) noexcept {
    return record(decide(now_ns), force, now_ns);
  }
  /// The decision alone: is the next batch in the sample? Its bookkeeping is record()'s,
  /// once the batch has come (a call that ends in StopIteration is no batch).
  /// take(now, force) is record(decide(now), force, now).
  bool decide(int64_t now_ns) noexcept;
  /// The bookkeeping of a batch that came, with the decision made for it ahead (decide())
  /// or elsewhere (a single-process fetch follows its hand-out's sample). True: measured.
  bool record(bool sampled, bool force, int64_t now_ns) noexcept;
  /// Fetches the last measured one stands for: itself and those skipped since the one before.
  uint32_t weight() const noexcept { return weight_; }
  /// Fetches skipped since the last measured one.
  uint32_t unmeasured() const noexcept { return unmeasured_; }
  /// The decision on a run of fetches instead of the next one alone: how many of the
  /// fetches after this one go unmeasured before the next measured one (0: the next is
  /// measured). The same sample as calling decide() at each (a geometric gap of mean
  /// period() - 1), cut so the run lasts at most about kMaxUnmeasuredNs at the slower of the
  /// last window's rate and the rate since the previous plan() (a loop that just slowed down
  /// plans short runs before its window shows it); their bookkeeping is one skipped(n) when
  /// the run ends. `now_ns` from the precise clock: runs are short.
  uint32_t plan(int64_t now_ns) noexcept;
  /// `n` fetches went unmeasured without a decision each (a run plan() allowed).
  void skipped(uint32_t n) noexcept {
    unmeasured_ += n;
    window_fetches_ += n;
    plan_fetches_ += n;
  }
  /// The unmeasured tail, handed over once when the stream ends (then 0).
  uint32_t take_unmeasured() noexcept;
  /// Current period: about one fetch in period() is measured.
  uint32_t period() const noexcept { return period_; }
  /// Fetches measured so far.
  uint64_t measured() const noexcept { return measured_; }
  /// Starts over (a new stream, or a forked child's own); `seed` 0 picks one.
  void reset(uint64_t seed = 0) noexcept;
  /// Starts at `period` (a power of two, clamped) instead of 1: a new epoch of a loader whose
  /// previous one ran fast is sampled from its first window on.
  void resume(uint32_t period) noexcept;

 private:
  /// The generator's state from `seed` (0: the clock and `at`).
  static uint64_t first_random(uint64_t seed, const void* at) noexcept;
  uint64_t next_random() noexcept;
  /// Counts the next fetch in the rate window; a window that is over sets the period.
  void count_next(int64_t now_ns) noexcept;

  int64_t measured_per_second_;
  int64_t sample_above_per_second_;
  uint64_t rng_ = 1;
  uint32_t period_ = 1;
  uint32_t weight_ = 1;
  uint32_t unmeasured_ = 0;
  uint64_t measured_ = 0;
  int64_t last_measured_ns_ = 0;
  int64_t window_start_ns_ = 0;
  int64_t window_fetches_ = 0;
  int64_t window_max_gap_ns_ = 0;  ///< the longest gap between two fetches of the window
  int64_t last_count_ns_ = 0;      ///< the last fetch counted
  int64_t per_second_ = 0;    ///< the last full window's rate (0: none yet)
  int64_t last_plan_ns_ = 0;  ///< the previous plan() (0: none)
  int64_t plan_fetches_ = 0;  ///< fetches counted since then
};

}  // namespace dldoctor::trace
