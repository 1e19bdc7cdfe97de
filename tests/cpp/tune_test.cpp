// dldoctor tune's choice of trials at its edges: the model's first pick per kind of loader,
// the climb over num_workers from what trials measured, a failed trial excluded, and the
// ceiling.
#include "dldoctor_core/analyze/tune.hpp"

#include <gtest/gtest.h>

namespace dldoctor::analyze::tune {
namespace {

Trial ok(Settings s, double bps) { return Trial{s, bps, bps * 0.02, true}; }
Trial failed(Settings s) { return Trial{s, std::nullopt, 0, false}; }
Settings workers(int n) { return Settings{n, std::nullopt, std::nullopt, std::nullopt}; }

/// The demo: 1 worker decoding JPEGs on 2 CPUs, the main process mostly waiting.
Profile demo() {
  Profile p;
  p.num_workers = 1;
  p.usable_cpus = 2;
  p.cpu_workers = 2;  // (2 - 0.3 main) / 1.0 per worker
  p.cpu_left = 1.7;
  p.per_worker_cpu = 1.0;
  p.fetch_s = 0.16;
  p.step_s = 0.01;
  p.main_cpu_cores = 0.3;
  p.batches_per_s = 6;
  return p;
}

/// Workers that wait ~20 ms a sample off-CPU, batches of 8.
Profile latency() {
  Profile p;
  p.num_workers = 2;
  p.usable_cpus = 2;
  p.off_cpu = true;
  p.fetch_s = 0.16;
  p.step_s = 0.005;
  p.per_worker_cpu = 0.05;
  p.batches_per_s = 12;
  return p;
}

TEST(Tune, CpuBoundFirstTriesWhatTheMeasuredCpuAllows) {
  const Profile p = demo();
  EXPECT_EQ(first_guess(p), workers(2));
  const std::vector<Trial> done = {ok({}, 6)};  // the diagnostic run: the job's own settings
  EXPECT_EQ(next_trial(p, done), workers(2));
}

TEST(Tune, AGainClimbsToTheNextWorkerCountAndALossStopsIt) {
  const Profile p = demo();
  std::vector<Trial> done = {ok({}, 6), ok(workers(2), 10.5)};
  // 2 beat 1 by more than kMinGain: one grid step past what the CPU allows is worth a look.
  EXPECT_EQ(next_trial(p, done), workers(4));
  done.push_back(ok(workers(4), 10.6));  // within kMinGain: not a gain, 2 stays the best
  auto n = next_trial(p, done);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->num_workers, 2);  // persistent_workers on the best next
  EXPECT_EQ(n->persistent_workers, true);
  done.push_back(ok(*n, 10.4));
  EXPECT_EQ(next_trial(p, done), std::nullopt);  // neighbours and settings tried: done
}

TEST(Tune, NoGainOverTheJobsOwnSettingsTriesFewer) {
  const Profile p = demo();
  std::vector<Trial> done = {ok({}, 6), ok(workers(2), 6.1)};
  // The best is still the job's own 1 worker: its neighbours are 2 (tried) and 0.
  EXPECT_EQ(next_trial(p, done), workers(0));
}

TEST(Tune, OffCpuWaitsGetWorkersForTheLoopsDemand) {
  const Profile p = latency();
  // ceil(0.16 s / 0.005 s x 1.1) = 36, capped at 32 (the sweep's top).
  EXPECT_EQ(first_guess(p), workers(32));
  Profile q = p;
  q.step_s = 0.02;  // ceil(0.16 / 0.02 x 1.1) = 9
  EXPECT_EQ(first_guess(q), workers(9));
  std::vector<Trial> done = {ok({}, 12), ok(workers(9), 50)};
  EXPECT_EQ(next_trial(q, done), workers(16));  // more first: the workers wait, not compute
}

TEST(Tune, OffCpuTriesMorePrefetchOnTheBest) {
  Profile p = latency();
  p.step_s = 0.02;
  std::vector<Trial> done = {ok({}, 12), ok(workers(9), 50), ok(workers(16), 51),
                             ok(workers(8), 45),
                             ok(Settings{9, std::nullopt, true, std::nullopt}, 49)};
  auto n = next_trial(p, done);
  ASSERT_TRUE(n);
  EXPECT_EQ(n->num_workers, 9);
  EXPECT_EQ(n->prefetch_factor, 4);
}

TEST(Tune, OversubscribedWorkersTryFewerFirst) {
  Profile p = demo();
  p.num_workers = 8;  // on 2 CPUs
  p.cpu_workers = 2;
  EXPECT_EQ(first_guess(p), workers(2));
  // The model's 2 measured no better than the job's own 8: the best stays at 8, past what
  // the CPU allows, so its neighbour below (4) comes before the one above (16).
  std::vector<Trial> done = {ok({}, 5), ok(workers(2), 5.1)};
  EXPECT_EQ(next_trial(p, done), workers(4));
}

TEST(Tune, StartUpCostGetsPersistentWorkersAndOversubscribedPoolsOneThread) {
  Profile p = demo();
  p.cpu_workers.reset();
  p.startup_bound = true;
  p.thread_oversubscribed = true;
  const Settings g = first_guess(p);
  EXPECT_EQ(g.num_workers, std::nullopt);
  EXPECT_EQ(g.persistent_workers, true);
  EXPECT_EQ(g.worker_threads, 1);
}

TEST(Tune, StartUpCostOrATinyFetchAlsoTriesNoWorkers) {
  Profile p = demo();
  p.num_workers = 2;
  p.cpu_workers.reset();
  p.startup_bound = true;  // many short epochs of spawned workers
  std::vector<Trial> done = {ok({}, 2.4)};
  EXPECT_EQ(next_trial(p, done), (Settings{std::nullopt, std::nullopt, true, std::nullopt}));
  done.push_back(ok(*next_trial(p, done), 800));
  EXPECT_EQ(next_trial(p, done), workers(0));  // before the climb over worker counts
  Profile q = demo();
  q.fetch_s = 0.0019;  // just under kInProcessFetchS, no start-up cost
  std::vector<Trial> d2 = {ok({}, 6), ok(workers(2), 10.5)};
  EXPECT_EQ(next_trial(q, d2), workers(0));
  q.fetch_s = 0.0021;  // just over: the climb goes on
  EXPECT_EQ(next_trial(q, d2), workers(4));
}

TEST(Tune, AFailedTrialIsExcludedAndNotRetried) {
  const Profile p = demo();
  std::vector<Trial> done = {ok({}, 6), failed(workers(2))};
  auto n = next_trial(p, done);  // the best is still the job's own; 2 failed, not tried again
  ASSERT_TRUE(n);
  EXPECT_NE(n->num_workers, 2);
  EXPECT_EQ(n->num_workers, 0);
  const std::vector<Trial> all_failed = {failed({}), failed(workers(2))};
  EXPECT_EQ(next_trial(p, all_failed), std::nullopt);
}

TEST(Tune, ALoaderThatKeepsUpIsLeftAlone) {
  Profile p = demo();
  p.keeps_up = true;
  EXPECT_EQ(first_guess(p), Settings{});
}

TEST(Tune, EffectiveSettingsFillInTheJobsOwn) {
  const Profile p = demo();
  EXPECT_EQ(effective(p, {}), (Settings{1, 2, false, std::nullopt}));
  EXPECT_EQ(effective(p, workers(0)), (Settings{0, std::nullopt, std::nullopt, std::nullopt}));
}

TEST(Tune, CeilingIsTheLowestMeasuredLimit) {
  Profile p = demo();
  // 1.7 cores / (0.16 s x 1.0) = 10.6 batches/s; the step allows 100; the main process
  // 6 / 0.3 = 20.
  auto c = ceiling(p);
  ASSERT_TRUE(c);
  EXPECT_EQ(c->limit, "usable cores x CPU per batch");
  EXPECT_NEAR(c->batches_per_s, 10.625, 1e-6);
  p.step_s = 0.125;  // a consumer slower than the CPU allows (8/s, above the 6 measured)
  EXPECT_EQ(ceiling(p)->limit, "the consumer's own step");
  EXPECT_NEAR(ceiling(p)->batches_per_s, 8, 1e-9);
  Profile l = latency();  // off-CPU: no CPU ceiling, the step's 200/s
  EXPECT_EQ(ceiling(l)->limit, "the consumer's own step");
  EXPECT_FALSE(ceiling(Profile{}));
  // A best trial faster than a limit disproves it: the next one up is named.
  Profile fast = demo();
  fast.batches_per_s = 11;  // above the CPU estimate of 10.6
  EXPECT_EQ(ceiling(fast)->limit, "the main process's step, unpickling and IPC at one core");
  fast.batches_per_s = 10.6;  // just under it: the CPU is still the ceiling
  fast.main_cpu_cores = 0.3;
  EXPECT_EQ(ceiling(fast)->limit, "usable cores x CPU per batch");
}

}  // namespace
}  // namespace dldoctor::analyze::tune
