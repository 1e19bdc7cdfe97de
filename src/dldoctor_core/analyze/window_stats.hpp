// Small bounded containers the analyzer keeps per loader: a ring of the newest records, a
// reservoir sample of the whole run, per-second sums, and a percentile. They bound memory
// whatever the batch rate (thousands of batches/s for hours) while keeping the figures the
// rules need for the recent window and for the whole run.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

namespace dldoctor::analyze {

/// Newest-N ring. push() overwrites the oldest once full.
template <class T, size_t N>
class Ring {
 public:
  void push(const T& v) noexcept {
    items_[head_] = v;
    head_ = (head_ + 1) % N;
    if (size_ < N) ++size_;
  }
  size_t size() const noexcept { return size_; }
  /// i = 0 is the newest.
  const T& newest(size_t i) const noexcept { return items_[(head_ + N - 1 - i) % N]; }
  template <class F>
  void for_each(F&& f) const {
    for (size_t i = 0; i < size_; ++i) f(newest(i));
  }

 private:
  std::array<T, N> items_{};
  size_t head_ = 0;
  size_t size_ = 0;
};

/// Uniform sample of everything pushed (Algorithm R) with a fixed-seed generator, so a
/// recorded stream always yields the same report.
template <class T>
class Reservoir {
 public:
  explicit Reservoir(size_t capacity) : capacity_(capacity) { items_.reserve(capacity); }
  void push(const T& v) {
    ++seen_;
    if (items_.size() < capacity_) {
      items_.push_back(v);
      return;
    }
    uint64_t j = next() % seen_;
    if (j < capacity_) items_[j] = v;
  }
  const std::vector<T>& items() const noexcept { return items_; }
  uint64_t seen() const noexcept { return seen_; }

 private:
  uint64_t next() noexcept {  // splitmix64
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t capacity_;
  uint64_t seen_ = 0;
  uint64_t state_ = 0x5EED;
  std::vector<T> items_;
};

/// Sums per whole second of CLOCK_MONOTONIC, for the last N seconds. `S` must have
/// `operator+=`. A record older than the ring holds is dropped here (it still counts in
/// the caller's whole-run totals).
template <class S, size_t N>
class SecondBuckets {
 public:
  S* at(int64_t t_ns) noexcept {
    int64_t sec = t_ns / 1'000'000'000;
    Bucket& b = buckets_[size_t(sec % int64_t(N))];
    if (b.second != sec) {
      if (b.second > sec) return nullptr;  // the slot already holds a newer second
      b.second = sec;
      b.sums = S{};
    }
    return &b.sums;
  }
  /// Sum of the buckets whose second lies in [from_ns, to_ns].
  S sum(int64_t from_ns, int64_t to_ns) const noexcept {
    int64_t lo = from_ns / 1'000'000'000, hi = to_ns / 1'000'000'000;
    S out{};
    for (const Bucket& b : buckets_)
      if (b.second >= lo && b.second <= hi) out += b.sums;
    return out;
  }

 private:
  struct Bucket {
    int64_t second = -1;
    S sums{};
  };
  std::array<Bucket, N> buckets_{};
};

/// The q-quantile (0..1) of `v` by nearest rank; empty input → unknown. Reorders `v`.
inline std::optional<double> quantile(std::vector<double>& v, double q) {
  if (v.empty()) return std::nullopt;
  size_t k = size_t(q * double(v.size() - 1) + 0.5);
  if (k >= v.size()) k = v.size() - 1;
  std::nth_element(v.begin(), v.begin() + ptrdiff_t(k), v.end());
  return v[k];
}

}  // namespace dldoctor::analyze
