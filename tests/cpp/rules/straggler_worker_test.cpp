// straggler_worker at the edges of its thresholds: the head-of-line wait's share of the loop
// and of the wait, out-of-order loaders, and a queue hand-off that is not head-of-line.
#include "dldoctor_core/analyze/rules/straggler_worker.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

/// 2 workers, batches of 8 ms, the loop steps 20 ms; every 12th batch is slow: its fetch
/// ends `slow_wait_ms` - 1 after the loop asks for it, while the next batch is already done.
std::vector<report::Finding> straggler_run(double slow_wait_ms, bool in_order = true,
                                           bool notes = false) {
  Session s;
  s.set_facts(facts(8));
  Loader l;
  if (!in_order) l.flags &= uint8_t(~trace::kInOrder);
  s.ingest(event(trace::EventKind::kIterStart, l.main_pid, kT0, l.id, 2, 2, 4, 0, l.main_pid,
                 int64_t(trace::StartMethod::kFork), 1, l.flags));
  int64_t t = kT0 + kS;
  for (int i = 0; i < 1200; ++i) {
    const bool slow = i % 12 == 5 && slow_wait_ms > 0;
    const int w = i % 2;
    int64_t wait = int64_t(0.05 * kMs);
    if (slow) {
      const int64_t own_end = t + int64_t((slow_wait_ms - 1) * kMs);
      const int64_t fetch = own_end - (t - 50 * kMs);
      // The next batch (other worker) finished before the loop asked for this one.
      s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(1 - w), t - 9 * kMs, l.id, 1 - w,
                     i + 1, 4, 8 * kMs, kMs, 7 * kMs, 64));
      s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(w), own_end - fetch, l.id, w, i,
                     4, fetch, kMs, kMs, 64));
      if (notes)
        s.note_slow_batch(
            l.id,
            SlowBatchNote{
                l.worker_pid(w), w, i, fetch, {i * 4LL, i * 4LL + 1, i * 4LL + 2, i * 4LL + 3}});
      wait = int64_t(slow_wait_ms * kMs);
    } else if (i % 12 != 6) {  // batch 6 of a cycle was fed with the slow one
      s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(w), t - 9 * kMs, l.id, w, i, 4,
                     8 * kMs, kMs, 7 * kMs, 64));
    }
    s.ingest(event(trace::EventKind::kMainBatch, l.main_pid, t, l.id, w, i, 0, wait,
                   i == 0 ? -1 : 20 * kMs, -1));
    t += wait + 20 * kMs;
  }
  return s.findings(0, Window::kWholeRun);
}

TEST(AnalyzeStraggler, SlowBatchesBlockingTheLoopAreCritical) {
  auto fs = straggler_run(150, true, true);
  const report::Finding* f = find(fs, "straggler_worker");
  ASSERT_NE(f, nullptr) << (fs.empty() ? "none" : ids(fs)[0]);
  EXPECT_EQ(f->severity, report::Severity::kCritical);
  EXPECT_EQ(Session::verdict(fs), "straggler_worker");
  // 100 slow batches each blocked 149 ms behind a finished one.
  EXPECT_NEAR(*num(*f, "head_of_line_wait_s"), 100 * 0.149, 1e-6);
  EXPECT_EQ(*num(*f, "head_of_line_batches"), 100);
  EXPECT_NE(f->fix.find("in_order=False"), std::string::npos);
  // The newest 64 notes are kept (slow batches 437, 449, ... 1193), their samples in order.
  EXPECT_EQ(text(*f, "slow_sample_indices")->rfind("1748, 1749, 1750, 1751, 1796, ", 0), 0u)
      << *text(*f, "slow_sample_indices");
  EXPECT_NE(text(*f, "batch_ms_per_worker")->find("worker 1"), std::string::npos);
}

TEST(AnalyzeStraggler, FlipsAtHeadOfLineShareOfTheLoop) {
  // Per 12 batches: 12 x 20 ms of steps, 11 x 0.05 + W ms of waits, W - 1 of it blocked.
  // (W - 1) / (240.55 + W) = 0.05 at W = 13.71 ms.
  EXPECT_EQ(find(straggler_run(13.2), "straggler_worker"), nullptr);
  EXPECT_NE(find(straggler_run(14.5), "straggler_worker"), nullptr);
}

TEST(AnalyzeStraggler, OutOfOrderOrUniformIsNothing) {
  EXPECT_EQ(find(straggler_run(150, false), "straggler_worker"), nullptr);
  EXPECT_TRUE(straggler_run(0).empty());
}

TEST(AnalyzeStraggler, ATransitWaitIsNotHeadOfLine) {
  // The loop waits 5 ms for a batch whose fetch ended before it asked (the queue hand-off):
  // a later batch being done then says nothing about a straggler.
  Session s;
  s.set_facts(facts(8));
  Loader l;
  s.ingest(event(trace::EventKind::kIterStart, l.main_pid, kT0, l.id, 2, 2, 4, 0, l.main_pid,
                 int64_t(trace::StartMethod::kFork), 1, l.flags));
  int64_t t = kT0 + kS;
  for (int i = 0; i < 400; ++i) {
    s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(i % 2), t - 9 * kMs, l.id, i % 2, i,
                   4, 8 * kMs, kMs, 7 * kMs, 64));
    s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(1 - i % 2), t - 9 * kMs, l.id,
                   1 - i % 2, i + 1000, 4, 8 * kMs, kMs, 7 * kMs, 64));
    s.ingest(event(trace::EventKind::kMainBatch, l.main_pid, t, l.id, i % 2, i, 0, 5 * kMs,
                   i == 0 ? -1 : 20 * kMs, -1));
    t += 25 * kMs;
  }
  auto v = s.view(0, Window::kWholeRun);
  ASSERT_EQ(v.loaders.size(), 1u);
  EXPECT_EQ(*v.loaders[0].head_of_line_s, 0);
}

}  // namespace
}  // namespace dldoctor::analyze
