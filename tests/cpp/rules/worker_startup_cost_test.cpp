// worker_startup_cost at the edges of its thresholds: the restarts' share of the epochs,
// persistent workers paying once, a heavy pickled dataset in the fix.
#include "dldoctor_core/analyze/rules/worker_startup_cost.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

/// `epochs` epochs of 50 batches (fetch 10 ms, step 20 ms), each starting its workers for
/// `startup_s` before the first batch (only the first when persistent), the second worker
/// coming up `stagger_s` after the first (its first batch waited for that long; else 0.1 ms).
std::vector<report::Finding> startup_run(int epochs, double startup_s, bool persistent,
                                         trace::StartMethod method = trace::StartMethod::kSpawn,
                                         std::optional<int64_t> pickled = std::nullopt,
                                         double stagger_s = 0) {
  Session s;
  s.set_facts(facts(8));
  Loader l;
  l.jitter = 0;
  if (persistent) l.flags |= trace::kPersistentWorkers;
  if (pickled) {
    DatasetNotes n;
    n.pickled_bytes = pickled;
    s.note_dataset(l.id, n);
  }
  int64_t t = kT0;
  for (int e = 1; e <= epochs; ++e) {
    s.ingest(event(trace::EventKind::kIterStart, l.main_pid, t, l.id, l.num_workers,
                   l.prefetch_factor, uint32_t(l.batch_size), 0, l.main_pid, int64_t(method), e,
                   l.flags));
    const double up = (e == 1 || !persistent) ? startup_s : 0.0;
    int64_t at = t;
    for (int i = 0; i < 50; ++i) {
      int64_t wait = i == 0 ? int64_t((up + 0.010) * kS) : int64_t(0.1 * kMs);
      if (i == 1 && up > 0 && stagger_s > 0) wait = int64_t(stagger_s * kS);
      const int64_t handed = at + wait;
      s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(i % 2), handed - 10 * kMs, l.id,
                     i % 2, i, uint32_t(l.batch_size), 10 * kMs, kMs, 9 * kMs, 1 << 20));
      s.ingest(event(trace::EventKind::kMainBatch, l.main_pid, at, l.id, i % 2, i, 0, wait,
                     i == 0 ? -1 : 20 * kMs, -1));
      at = handed + 20 * kMs;
    }
    s.ingest(event(trace::EventKind::kIterEnd, l.main_pid, at, l.id, -1, 50, 0, 0, e));
    t = at;
  }
  return s.findings(0, Window::kWholeRun);
}

TEST(AnalyzeStartup, RestartsEveryEpochAreNamed) {
  auto fs = startup_run(4, 2.0, false);
  const report::Finding* f = find(fs, "worker_startup_cost");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, report::Severity::kCritical);
  EXPECT_EQ(*num(*f, "restarts"), 3);
  // Its start-up and the second worker's first batch, which waited 0.1 ms.
  EXPECT_NEAR(*num(*f, "startup_s_per_restart"), 2.0001, 1e-6);
  EXPECT_EQ(*text(*f, "start_method"), "spawn");
  EXPECT_NE(f->fix.find("persistent_workers=True"), std::string::npos);
  EXPECT_NE(text(*f, "first_batch_latency_ms_each")->find("2: 2010"), std::string::npos)
      << *text(*f, "first_batch_latency_ms_each");
}

TEST(AnalyzeStartup, FlipsAtShareOfTheEpochs) {
  // Wall per epoch = startup + 0.01 + 49 x 0.0201 + 0.02 ~ startup + 1.015 s; 3 of 4 restart.
  // share = 3x / (4 (x + 1.015)): 0.10 at x = 0.156, 0.25 at x = 0.508.
  EXPECT_EQ(find(startup_run(4, 0.14, false), "worker_startup_cost"), nullptr);
  auto warn = startup_run(4, 0.17, false);
  ASSERT_NE(find(warn, "worker_startup_cost"), nullptr);
  EXPECT_EQ(find(warn, "worker_startup_cost")->severity, report::Severity::kWarning);
  EXPECT_EQ(find(startup_run(4, 0.48, false), "worker_startup_cost")->severity,
            report::Severity::kWarning);
  EXPECT_EQ(find(startup_run(4, 0.54, false), "worker_startup_cost")->severity,
            report::Severity::kCritical);
}

// Spawned workers come up one after the other: the loop waits for the first worker's batch
// (the first-batch latency) and then for the second's. Both waits are the restart's cost;
// the first alone would be under the threshold.
TEST(AnalyzeStartup, LaterWorkersFirstBatchesAreStartUp) {
  EXPECT_EQ(find(startup_run(4, 0.12, false), "worker_startup_cost"), nullptr);
  // An epoch: 0.13 s to the first batch, 0.6 s for the second, 48 more at 20.1 ms, steps of
  // 20 ms: 1.735 s, of which 0.12 + 0.6 start-up. 3 of 4 restart: 3 x 0.72 / (4 x 1.735) = 0.31.
  auto fs = startup_run(4, 0.12, false, trace::StartMethod::kSpawn, std::nullopt, 0.6);
  const report::Finding* f = find(fs, "worker_startup_cost");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(*num(*f, "startup_s_per_restart"), 0.12 + 0.6, 1e-6);
  EXPECT_NEAR(*num(*f, "startup_share"), 0.311, 0.002);
  EXPECT_EQ(f->severity, report::Severity::kCritical);
}

TEST(AnalyzeStartup, PersistentWorkersPayOnce) {
  EXPECT_EQ(find(startup_run(4, 2.0, true), "worker_startup_cost"), nullptr);
  // A heavy dataset under spawn makes the one start-up worth an informational note.
  auto fs = startup_run(4, 2.0, true, trace::StartMethod::kSpawn, 100 * kMiB);
  const report::Finding* f = find(fs, "worker_startup_cost");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, report::Severity::kInfo);
  EXPECT_EQ(*num(*f, "pickled_dataset_mib"), 100);
  EXPECT_EQ(*num(*f, "pickled_per_start_mib"), 200);
  // Under fork nothing is pickled: no note.
  EXPECT_EQ(
      find(startup_run(4, 2.0, true, trace::StartMethod::kFork, 100 * kMiB), "worker_startup_cost"),
      nullptr);
}

TEST(AnalyzeStartup, HeavyPickleIsInTheFix) {
  auto fs = startup_run(4, 2.0, false, trace::StartMethod::kSpawn, 100 * kMiB);
  const report::Finding* f = find(fs, "worker_startup_cost");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->fix.find("lighter"), std::string::npos);
  EXPECT_NE(f->fix.find("100 MiB"), std::string::npos);
}

}  // namespace
}  // namespace dldoctor::analyze
