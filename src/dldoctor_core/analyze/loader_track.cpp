// Folding one loader's events into bounded running state.
#include "dldoctor_core/analyze/loader_track.hpp"

#include <algorithm>

namespace dldoctor::analyze {

void LoaderTrack::on_iter_start(const trace::Event& e) noexcept {
  config_.known = true;
  config_.num_workers = std::max<int>(0, e.worker);
  config_.batch_size = e.count ? std::optional<int>(int(e.count)) : std::nullopt;
  config_.prefetch_factor = e.index > 0 ? std::optional<int>(e.index) : std::nullopt;
  config_.flags = e.flags;
  config_.timeout_ms = e.v[0] >= 0 ? std::optional<int64_t>(e.v[0]) : std::nullopt;
  config_.main_pid = e.v[1] > 0 ? int(e.v[1]) : int(e.pid);
  config_.start_method = (e.v[2] >= 0 && e.v[2] <= 3) ? trace::StartMethod(e.v[2])
                                                      : trace::StartMethod::kUnknown;
  ++epochs_started_;
  if (epochs_.size() >= kMaxEpochs) epochs_.erase(epochs_.begin());
  EpochRecord ep;
  ep.start_ns = e.t_ns;
  ep.num_workers = config_.num_workers;
  ep.flags = e.flags;
  ep.ordinal = e.v[3] > 0 ? e.v[3] : epochs_started_;
  epochs_.push_back(ep);
  awaiting_first_batch_ = true;
  ++generation_;
  done_in_iter_ = handed_in_iter_ = 0;  // an iterator's leftovers are dropped with it
  fill_.on_iter_start(config_.num_workers);
  epoch_ordinal_ = int32_t(ep.ordinal);
}

void LoaderTrack::on_iter_end(const trace::Event& e) noexcept {
  if (!epochs_.empty() && !epochs_.back().end_ns) epochs_.back().end_ns = e.t_ns;
  awaiting_first_batch_ = false;
  // A single-process iterator's sample tails: fetches and hand-outs no event stood for.
  on_unmeasured_fetches(-1, e.v[2]);
  if (e.v[3] > 0) {
    main_total_.batches += e.v[3];
    if (!epochs_.empty()) epochs_.back().batches += e.v[3];
  }
}

void LoaderTrack::on_worker_drained(const trace::Event& e) {
  if (epochs_.empty() || e.worker < 0) return;
  EpochRecord& ep = epochs_.back();
  if (ep.drained.size() >= kMaxDrained) return;
  for (const DrainedWorker& d : ep.drained)
    if (d.worker == e.worker) return;
  ep.drained.push_back({int(e.worker), e.t_ns, std::max<int64_t>(0, e.v[0])});
}

void LoaderTrack::on_unmeasured_fetches(int worker, int64_t n) noexcept {
  if (n <= 0) return;
  worker_total_.batches += n;
  workers_[worker].batches += n;
}

void LoaderTrack::on_worker_batch(const trace::Event& e) noexcept {
  const int64_t fetch = std::max<int64_t>(0, e.v[0]);
  // A collate longer than the fetch it is part of is a clock glitch: clamp, never negative.
  const int64_t collate = std::clamp<int64_t>(e.v[1], 0, fetch);
  const bool cpu_known = e.v[2] >= 0;
  const bool timed = !(e.flags & kProfiledFetch);
  // A fast stream's event stands for `n` fetches (the writer measured a random sample):
  // sums count it n times, so totals stay exact and means unbiased; the distributions below
  // (percentiles, slowest, recent) keep it once, as the sample it is.
  const int64_t n = trace::batches_of(e);
  WorkerSums s;
  s.batches = n;
  if (timed) {
    s.timed = n;
    s.samples = n * e.count;
    s.fetch_ns = n * fetch;
    s.collate_ns = n * collate;
    if (cpu_known) {
      s.cpu_ns = n * std::min(e.v[2], fetch);  // one thread cannot run longer than the wall time
      s.cpu_fetch_ns = n * fetch;
    }
  }
  if (e.v[3] >= 0) {
    s.bytes = n * e.v[3];
    s.bytes_batches = n;
  }
  worker_total_ += s;
  const int64_t t_end = e.t_ns + fetch;
  if (WorkerSums* b = worker_recent_.at(t_end)) *b += s;
  WorkerTrack& w = workers_[e.worker];
  if (e.pid) w.pid = int(e.pid);
  w.batches += n;
  if (e.index >= 0) done_.push(DoneBatch{e.index, t_end, generation_});
  if (e.worker >= 0) done_in_iter_ += n;
  if (!timed) return;
  WorkerBatchRecord rec{t_end, fetch, collate, e.count, e.index, e.worker, epoch_ordinal_};
  recent_batches_.push(rec);
  reservoir_.push(rec);
  if (slowest_.size() < kSlowest || fetch > slowest_.back().fetch_ns) {
    auto at = std::upper_bound(
        slowest_.begin(), slowest_.end(), fetch,
        [](int64_t f, const WorkerBatchRecord& r) { return f > r.fetch_ns; });
    slowest_.insert(at, rec);
    if (slowest_.size() > kSlowest) slowest_.pop_back();
  }
  w.timed += n;
  w.samples += n * e.count;
  w.max_fetch_ns = std::max(w.max_fetch_ns, fetch);
  w.recent_end_ns.push(t_end);
  w.fetch_sample.push(fetch);
  w.fetch_ns += n * fetch;
  if (cpu_known) {
    w.cpu_ns += s.cpu_ns;
    w.cpu_fetch_ns += s.cpu_fetch_ns;
  }
  w.recent_fetch_ns.push(fetch);
}

void LoaderTrack::on_main_batch(const trace::Event& e) noexcept {
  if (!main_event_pid_) main_event_pid_ = int(e.pid);
  const int64_t wait = std::max<int64_t>(0, e.v[0]);
  const int64_t t_out = e.t_ns + wait;
  const int64_t n = trace::batches_of(e);  // a sampled fast loop: the hand-outs it stands for
  MainSums s;
  s.batches = n;
  const bool filling = fill_.filling(e);
  if (!filling) {
    wait_sample_.push(wait);  // a sampled loop's events are a random sample of its batches
    s.stepped = n;
    s.wait_ns = n * wait;
    s.step_ns = n * e.v[1];
    // Events reach the ring in the order they were written: a worker that ran out before
    // this batch was asked for has said so by now.
    if (!epochs_.empty() && !epochs_.back().drained.empty() &&
        epochs_.back().drained.front().t_ns <= e.t_ns)
      s.short_wait_ns = n * wait;
    if (double(wait) >= kWaitedBatchShare * double(wait + e.v[1]) && wait > 0) {
      s.waited = n;
      s.waited_step_ns = n * e.v[1];
    }
    // The batch's own fetch end splits a real wait: before it, the loop waited for a batch
    // not yet made; after it, for the hand-over (a batch of many tensors, each a descriptor
    // to receive and map, takes milliseconds, and unevenly). Head-of-line: in order, the
    // loop waits for batch `index` alone; the part of that wait while it was still being
    // fetched and a later batch of the same iterator was already done is time lost to the
    // straggler (after its own fetch ends, the rest is the queue hand-off, which every batch
    // pays). The scan is bounded (kDoneBatches) and done only for real waits.
    if (wait >= kHolMinWaitNs && e.index >= 0) {
      int64_t earliest = t_out;
      std::optional<int64_t> own_end;
      done_.for_each([&](const DoneBatch& d) {
        if (d.generation != generation_) return;
        if (d.index == e.index && !own_end) own_end = d.t_end_ns;  // newest first: its latest
        if (d.index > e.index && d.t_end_ns < earliest) earliest = d.t_end_ns;
      });
      if (own_end) {
        const int64_t handover = t_out - std::clamp(*own_end, e.t_ns, t_out);
        s.made_known = n;
        s.made_wait_ns = n * handover;
        handover_sample_.push(handover);
        const int64_t hol = std::min(t_out, *own_end) - std::max(e.t_ns, earliest);
        if ((config_.flags & trace::kInOrder) && hol > 0) {
          s.hol_ns = n * hol;
          s.hol_batches = n;
        }
      }
    }
  } else {
    s.first_wait_ns = n * wait;
  }
  if (e.v[2] >= 0) {
    s.pin_ns = n * e.v[2];
    s.pinned = n;
  }
  // Events reach the ring in the order they were written, so at this hand-out the workers'
  // events of every batch they finished are in: the difference is what waits in the queues.
  handed_in_iter_ += n;
  if (config_.num_workers > 0) {
    const int64_t ready = std::max<int64_t>(0, done_in_iter_ - handed_in_iter_);
    s.ready_sum = n * ready;  // per hand-out: a sampled one stands for n
    s.ready_max = ready;
  }
  main_total_ += s;
  if (MainSums* b = main_recent_.at(t_out)) *b += s;
  if (!first_main_ns_) first_main_ns_ = e.t_ns;
  last_main_ns_ = std::max(last_main_ns_.value_or(t_out), t_out);

  if (!epochs_.empty()) {
    EpochRecord& ep = epochs_.back();
    if (awaiting_first_batch_) {
      ep.first_batch_latency_ns = std::max<int64_t>(0, t_out - ep.start_ns);
      awaiting_first_batch_ = false;
    }
    if (filling && e.v[1] >= 0) ep.later_workers_wait_ns += n * wait;
    ep.batches += n;
    ep.last_batch_ns = std::max(ep.last_batch_ns, t_out);
  }
}

LoaderConfig LoaderTrack::config() const noexcept {
  LoaderConfig c = config_;
  if (!c.known) {
    int n = 0;
    for (const auto& [id, w] : workers_) n += id >= 0;
    c.num_workers = n;
  }
  if (!c.main_pid) c.main_pid = main_event_pid_;
  return c;
}

std::vector<WorkerBatchRecord> LoaderTrack::worker_batches_since(int64_t from_ns) const {
  if (from_ns < 0) return reservoir_.items();
  std::vector<WorkerBatchRecord> out;
  recent_batches_.for_each([&](const WorkerBatchRecord& r) {
    if (r.t_end_ns >= from_ns) out.push_back(r);
  });
  return out;
}

}  // namespace dldoctor::analyze
