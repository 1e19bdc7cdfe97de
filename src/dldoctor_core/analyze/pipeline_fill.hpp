// Which of a loader's hand-outs are its pipeline filling rather than its pace: an
// iterator's first batch (no consumer step before it) and each worker's first batch of the
// iterator. The latter waits for that worker's start-up: spawned workers come up one after
// the other, each importing torch and unpickling the dataset, so with a fast loop the
// second worker's first batch can wait hundreds of milliseconds after the first's. That
// wait is start-up cost (worker_startup_cost judges it per epoch), not a loader that cannot
// keep up; counting it as stall would name a healthy loader data-bound.
#pragma once

#include <vector>

#include "dldoctor_core/trace/event.hpp"

namespace dldoctor::analyze {

class PipelineFill {
 public:
  /// A new iterator (kIterStart; its `worker` field is num_workers).
  void on_iter_start(int num_workers) noexcept {
    num_workers_ = num_workers;
    handed_.clear();
  }

  /// Whether the hand-out `e` (kMainBatch) fills the pipeline. Call once per hand-out, in
  /// order: it remembers which workers have handed out a batch of this iterator.
  bool filling(const trace::Event& e) noexcept {
    const bool first_of_iterator = e.v[1] < 0;  // no step since a previous hand-out
    if (e.worker < 0 || num_workers_ <= 0 || e.worker >= kMaxWorkerId) return first_of_iterator;
    const size_t w = size_t(e.worker);
    if (w >= handed_.size()) handed_.resize(w + 1, false);
    if (handed_[w]) return first_of_iterator;
    handed_[w] = true;
    return true;
  }

 private:
  static constexpr int kMaxWorkerId = 4096;  ///< ids beyond are not tracked (never in practice)
  int num_workers_ = 0;
  std::vector<bool> handed_;
};

}  // namespace dldoctor::analyze
