// A loader's events folded into its track when the writer measured a sample of a fast stream
// (each event standing for `weight` batches, the unmeasured tail on kIterEnd / kWorkerExit):
// the counts come out exact and the figures the rules read (data stall, per-sample times,
// bytes per batch, on-CPU share) as from every batch. Which hand-outs fill the pipeline
// (worker start-up) rather than measure the loader's pace, and which part of a wait is the
// hand-over.
#include "dldoctor_core/analyze/loader_track.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "dldoctor_core/analyze/data_bound.hpp"
#include "dldoctor_core/analyze/session.hpp"
#include "dldoctor_core/trace/batch_sampler.hpp"

namespace dldoctor::analyze {
namespace {

using trace::Event;
using trace::EventKind;

constexpr int64_t kUs = 1000;
constexpr int64_t kT0 = 5'000'000'000'000;

Event iter_start(uint16_t loader, int64_t t) {
  Event e;
  e.kind = EventKind::kIterStart;
  e.t_ns = t;
  e.loader = loader;
  e.worker = 0;  // num_workers
  e.count = 8;
  e.flags = trace::kInOrder;
  e.v[1] = 100;
  e.v[3] = 1;
  return e;
}

/// One single-process batch: its fetch and its hand-out, as the hooks write them.
struct Batch {
  int64_t t, fetch_ns, collate_ns, step_ns, bytes, cpu_ns;
  int32_t index;
};

Event fetch_event(const Batch& b, uint16_t weight) {
  Event e;
  e.kind = EventKind::kWorkerBatch;
  e.pid = 100;
  e.t_ns = b.t;
  e.loader = 1;
  e.worker = -1;
  e.index = b.index;
  e.count = 8;
  e.v[0] = b.fetch_ns;
  e.v[1] = b.collate_ns;
  e.v[2] = b.cpu_ns;
  e.v[3] = b.bytes;
  e.weight = weight;
  return e;
}

Event handout_event(const Batch& b, bool first, uint16_t weight) {
  Event e;
  e.kind = EventKind::kMainBatch;
  e.pid = 100;
  e.t_ns = b.t;
  e.loader = 1;
  e.worker = -1;
  e.index = b.index;
  e.count = 8;
  e.v[0] = b.fetch_ns;  // blocked for its own fetch
  e.v[1] = first ? -1 : b.step_ns;
  e.v[2] = -1;
  e.weight = weight;
  return e;
}

// 80,000 batches/s for 5 s, every batch recorded in `full`, a sample in `sampled` (the
// hooks' own sampler, deciding as they do), with the tails on kIterEnd.
class SampledLoop : public ::testing::Test {
 protected:
  void SetUp() override {
    std::mt19937_64 rng(42);
    std::lognormal_distribution<double> fetch_us(std::log(9.0), 0.4);
    std::uniform_real_distribution<double> step_us(2.0, 4.0);
    trace::BatchSampler handouts(1), fetches(2);
    const Event start = iter_start(1, kT0);
    full_.on_iter_start(start);
    sampled_.on_iter_start(start);
    int64_t t = kT0 + 1000 * kUs;
    bool next = true;
    for (int32_t i = 0; i < kBatches; ++i) {
      Batch b{t, int64_t(fetch_us(rng) * kUs), 0, int64_t(step_us(rng) * kUs), 0, 0, i};
      b.collate_ns = b.fetch_ns / 4;
      b.bytes = i % 3 == 0 ? 4096 : 64;
      b.cpu_ns = b.fetch_ns * 9 / 10;
      full_.on_worker_batch(fetch_event(b, 1));
      full_.on_main_batch(handout_event(b, i == 0, 1));
      // As the hooks decide: the hand-out at the previous batch; the fetch follows it.
      const bool measure = i == 0 || handouts.record(next, false, t);
      const uint16_t w = i == 0 ? 1 : uint16_t(handouts.weight());
      if (fetches.record(measure, false, t))
        sampled_.on_worker_batch(fetch_event(b, uint16_t(fetches.weight())));
      if (measure) sampled_.on_main_batch(handout_event(b, i == 0, w));
      t += b.fetch_ns + b.step_ns;
      next = handouts.decide(t);
    }
    Event end;
    end.kind = EventKind::kIterEnd;
    end.t_ns = t;
    end.loader = 1;
    end.index = kBatches;
    full_.on_iter_end(end);
    end.v[2] = fetches.take_unmeasured();
    end.v[3] = handouts.take_unmeasured();
    sampled_.on_iter_end(end);
    measured_ = int64_t(handouts.measured());
  }

  static constexpr int32_t kBatches = 400'000;
  LoaderTrack full_, sampled_;
  int64_t measured_ = 0;
};

TEST_F(SampledLoop, TheSampleIsSmall) {
  EXPECT_LT(measured_, kBatches / 20);
  EXPECT_GT(measured_, 3000);
}

TEST_F(SampledLoop, CountsAreExact) {
  EXPECT_EQ(sampled_.main_total().batches, kBatches);
  EXPECT_EQ(sampled_.worker_total().batches, kBatches);
  EXPECT_EQ(sampled_.workers().at(-1).batches, kBatches);
  ASSERT_EQ(sampled_.epochs().size(), 1u);
  EXPECT_EQ(sampled_.epochs()[0].batches, kBatches);
  EXPECT_EQ(sampled_.epochs()[0].first_batch_latency_ns,
            full_.epochs()[0].first_batch_latency_ns);  // the first hand-out is measured
}

TEST_F(SampledLoop, TheRulesFiguresAreThoseOfEveryBatch) {
  auto near = [](double sampled, double full, double tolerance) {
    EXPECT_NEAR(sampled / full, 1.0, tolerance) << sampled << " vs " << full;
  };
  const MainSums& fm = full_.main_total();
  const MainSums& sm = sampled_.main_total();
  near(double(sm.wait_ns) / double(sm.wait_ns + sm.step_ns),
       double(fm.wait_ns) / double(fm.wait_ns + fm.step_ns), 0.02);  // data stall
  near(double(sm.step_ns) / double(sm.stepped), double(fm.step_ns) / double(fm.stepped), 0.02);
  const WorkerSums& fw = full_.worker_total();
  const WorkerSums& sw = sampled_.worker_total();
  // per-sample time, collate share, on-CPU share, bytes per batch (bytes in flight)
  near(double(sw.fetch_ns) / double(sw.samples), double(fw.fetch_ns) / double(fw.samples), 0.02);
  near(double(sw.collate_ns) / double(sw.fetch_ns), double(fw.collate_ns) / double(fw.fetch_ns),
       0.02);
  near(double(sw.cpu_ns) / double(sw.cpu_fetch_ns), double(fw.cpu_ns) / double(fw.cpu_fetch_ns),
       0.02);
  // Bytes take two values 64x apart here, so their sample mean has a standard error of ~2%
  // (the others' ~0.5%): each tolerance is about four of them.
  near(double(sw.bytes) / double(sw.bytes_batches), double(fw.bytes) / double(fw.bytes_batches),
       0.1);
  // The percentiles come from the sample's own records.
  auto p50 = [](const std::vector<WorkerBatchRecord>& v) {
    std::vector<int64_t> f;
    for (const auto& r : v) f.push_back(r.fetch_ns);
    std::nth_element(f.begin(), f.begin() + f.size() / 2, f.end());
    return double(f[f.size() / 2]);
  };
  near(p50(sampled_.worker_batches_since(-1)), p50(full_.worker_batches_since(-1)), 0.05);
}

TEST(SessionIngest, AWorkersSampleTailArrivesWithItsExit) {
  Session s;
  Event start = iter_start(3, kT0);
  start.worker = 1;
  s.ingest(start);
  Event b;
  b.kind = EventKind::kWorkerBatch;
  b.pid = 200;
  b.t_ns = kT0 + 1000;
  b.loader = 3;
  b.worker = 0;
  b.count = 8;
  b.v[0] = 10 * kUs;
  b.weight = 40;
  s.ingest(b);
  Event exit;
  exit.kind = EventKind::kWorkerExit;
  exit.pid = 200;
  exit.t_ns = kT0 + 2000;
  exit.loader = 3;
  exit.worker = 0;
  exit.v[0] = 57;  // batches it fetched
  exit.v[2] = 17;  // that no event stood for
  s.ingest(exit);
  const JobView v = s.view(kT0 + 3000, Window::kWholeRun);
  ASSERT_EQ(v.loaders.size(), 1u);
  EXPECT_EQ(v.loaders[0].worker_batches, 57);
}

// An in-order loader with `workers` workers, each fetching a batch in `fetch_ns`, worker k
// coming up `up_ns[k]` after the iterator starts (spawned workers start one after the
// other), and a consumer that steps `step_ns` per batch: the events its hooks write.
std::vector<Event> in_order_iterator(int64_t t0, const std::vector<int64_t>& up_ns,
                                     int64_t fetch_ns, int64_t step_ns, int32_t batches) {
  const int workers = int(up_ns.size());
  std::vector<Event> out;
  Event start = iter_start(1, t0);
  start.worker = int16_t(workers);
  out.push_back(start);
  std::vector<int64_t> free_at(workers);
  for (int k = 0; k < workers; ++k) free_at[k] = t0 + up_ns[k];
  int64_t asked = t0;
  for (int32_t i = 0; i < batches; ++i) {
    const int k = i % workers;
    const int64_t done = free_at[k] + fetch_ns;
    Event f;
    f.kind = EventKind::kWorkerBatch;
    f.pid = 200 + k;
    f.t_ns = free_at[k];
    f.loader = 1;
    f.worker = int16_t(k);
    f.index = i;
    f.count = 4;
    f.v[0] = fetch_ns;
    f.v[2] = -1;
    f.v[3] = -1;
    out.push_back(f);
    free_at[k] = done;
    const int64_t handed = std::max(asked, done);
    Event h;
    h.kind = EventKind::kMainBatch;
    h.pid = 100;
    h.t_ns = asked;
    h.loader = 1;
    h.worker = int16_t(k);
    h.index = i;
    h.v[0] = handed - asked;
    h.v[1] = i == 0 ? -1 : step_ns;
    h.v[2] = -1;
    out.push_back(h);
    asked = handed + step_ns;
  }
  return out;
}

double stall_of(const std::vector<Event>& events) {
  Session s;
  for (const Event& e : events) s.ingest(e);
  const JobView v = s.view(events.back().t_ns + 1000 * kUs, Window::kWholeRun);
  EXPECT_EQ(v.loaders.size(), 1u);
  if (v.loaders.empty() || !v.loaders[0].data_stall_fraction) return -1;
  return *v.loaders[0].data_stall_fraction;
}

constexpr int64_t kMs = 1000 * kUs;

// A fast loader whose second worker came up 300 ms after its first (a spawned worker's
// imports): the consumer waits for that worker's first batch once, and then never. That
// wait is start-up, not a loader that cannot keep up.
TEST(PipelineFill, AWorkersLateFirstBatchIsStartUpNotStall) {
  for (int epochs : {1, 3}) {
    std::vector<Event> events;
    int64_t t = kT0;
    for (int ep = 0; ep < epochs; ++ep) {
      auto it = in_order_iterator(t, {1000 * kMs, 1300 * kMs}, 400 * kUs, 20 * kMs, 200);
      t = it.back().t_ns + 100 * kMs;
      events.insert(events.end(), it.begin(), it.end());
    }
    const double stall = stall_of(events);
    EXPECT_GE(stall, 0) << epochs;
    EXPECT_LT(stall, 0.01) << epochs;
  }
}

// The same start-up before a loader that cannot keep up (2 workers, 60 ms a batch, 20 ms
// a step: 10 ms waited per batch): its steady waits still count.
TEST(PipelineFill, ASlowLoaderStillStalls) {
  const double stall =
      stall_of(in_order_iterator(kT0, {1000 * kMs, 1300 * kMs}, 60 * kMs, 20 * kMs, 200));
  EXPECT_NEAR(stall, 10.0 / 30.0, 0.02);
}

// Direct: an iterator's first hand-out and each worker's first are filling, the rest not;
// a new iterator starts over; a hand-out of the main process is filling only when first.
TEST(PipelineFill, FirstOfIteratorAndOfEachWorker) {
  PipelineFill fill;
  auto handout = [](int worker, bool first) {
    Event e;
    e.kind = EventKind::kMainBatch;
    e.worker = int16_t(worker);
    e.v[1] = first ? -1 : 5;
    return e;
  };
  fill.on_iter_start(3);
  EXPECT_TRUE(fill.filling(handout(0, true)));
  EXPECT_TRUE(fill.filling(handout(1, false)));
  EXPECT_FALSE(fill.filling(handout(0, false)));
  EXPECT_TRUE(fill.filling(handout(2, false)));
  EXPECT_FALSE(fill.filling(handout(1, false)));
  EXPECT_FALSE(fill.filling(handout(-1, false)));  // worker unknown
  fill.on_iter_start(3);
  EXPECT_TRUE(fill.filling(handout(1, true)));
  EXPECT_TRUE(fill.filling(handout(0, false)));
  EXPECT_FALSE(fill.filling(handout(1, false)));
  fill.on_iter_start(0);  // single-process: only the iterator's first
  EXPECT_TRUE(fill.filling(handout(-1, true)));
  EXPECT_FALSE(fill.filling(handout(-1, false)));
}

// Workers far ahead of a 20 ms step (every batch made long before it is asked for) whose
// batches take 3 ms to hand over, every tenth 9 ms (many tensors, each a descriptor to
// receive and map): the loop waits 15% of its time, all of it hand-over, measured batch by
// batch from each batch's fetch end, in order or not (head-of-line only in order).
TEST(HandOver, TheWaitAfterItsBatchWasMadeIsTheHandOver) {
  for (bool in_order : {true, false}) {
    std::vector<Event> events = in_order_iterator(kT0, {0, 0}, 400 * kUs, 20 * kMs, 200);
    if (!in_order) events.front().flags = 0;
    int i = 0;
    for (Event& e : events)
      if (e.kind == EventKind::kMainBatch) e.v[0] += (++i % 10 == 0 ? 9 : 3) * kMs;
    Session s;
    for (const Event& e : events) s.ingest(e);
    const JobView v = s.view(events.back().t_ns + 1000 * kMs, Window::kWholeRun);
    ASSERT_EQ(v.loaders.size(), 1u);
    const LoaderView& l = v.loaders[0];
    EXPECT_GT(*l.data_stall_fraction, 0.14) << in_order;
    EXPECT_GE(l.handover_measured, l.stepped_batches - 1) << in_order;
    EXPECT_NEAR(*handover_mean_s(l), 3.6e-3, 0.1e-3) << in_order;
    EXPECT_LT(*stall_beyond_handover(l), 0.005) << in_order;
    EXPECT_EQ(l.head_of_line_s.value_or(0), 0) << in_order;
  }
  // The same waits for batches made only as they are handed out: all of it is stall.
  std::vector<Event> late = in_order_iterator(kT0, {0, 0}, 400 * kUs, 20 * kMs, 200);
  int i = 0;
  for (size_t k = 0; k + 1 < late.size(); ++k) {
    Event& f = late[k];
    Event& h = late[k + 1];
    if (f.kind != EventKind::kWorkerBatch || h.kind != EventKind::kMainBatch) continue;
    h.v[0] += (++i % 10 == 0 ? 9 : 3) * kMs;
    f.t_ns = h.t_ns + h.v[0] - f.v[0];  // the fetch ends as the batch is handed out
  }
  Session s;
  for (const Event& e : late) s.ingest(e);
  const JobView v = s.view(late.back().t_ns + 1000 * kMs, Window::kWholeRun);
  ASSERT_EQ(v.loaders.size(), 1u);
  EXPECT_GT(*stall_beyond_handover(v.loaders[0]), 0.14);

  // The same batch numbers again 10 s later with no new iterator between (a stream whose
  // start was not seen): each wait is split at its batch's latest fetch end, not at the
  // one 10 s before, which would make the whole wait a hand-over.
  Session again;
  for (const Event& e : late) again.ingest(e);
  for (Event e : late) {
    if (e.kind == EventKind::kIterStart || e.kind == EventKind::kWorkerStart) continue;
    e.t_ns += 10'000 * kMs;
    again.ingest(e);
  }
  const JobView w = again.view(late.back().t_ns + 11'000 * kMs, Window::kWholeRun);
  ASSERT_EQ(w.loaders.size(), 1u);
  EXPECT_GT(*stall_beyond_handover(w.loaders[0]), 0.14);
}

}  // namespace
}  // namespace dldoctor::analyze
