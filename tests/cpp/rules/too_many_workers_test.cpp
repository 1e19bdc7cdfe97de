// too_many_workers at the edges of its thresholds: run-queue delay, or preemption when that is
// unknown; never from os.cpu_count(); the budget split across loaders.
#include "dldoctor_core/analyze/rules/too_many_workers.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

TEST(AnalyzeTooManyWorkers, OversubscribedCpuBoundWorkersAreTheVerdict) {
  Loader l = oversubscribed();
  auto r = run(l, procs(l, 60.0, 33.0, 60.0, 200.0), 2);
  ASSERT_FALSE(r->whole.empty());
  const report::Finding& f = r->whole[0];
  EXPECT_EQ(f.id, "too_many_workers");
  EXPECT_EQ(f.severity, report::Severity::kCritical);
  EXPECT_EQ(Session::verdict(r->whole), "too_many_workers");
  EXPECT_EQ(*num(f, "total_workers"), 6);
  EXPECT_EQ(*num(f, "usable_cpus"), 2);
  EXPECT_NEAR(*num(f, "run_queue_delay_pct"), 60, 1e-9);
  EXPECT_NEAR(*num(f, "involuntary_cs_per_s"), 200, 1e-9);
  EXPECT_NEAR(*num(f, "worker_cpu_pct"), 33, 1e-9);
  // (2 usable - 0.6 main) = 1.4 cores: one whole worker and 0.4 of another, never
  // os.cpu_count() (64 online).
  EXPECT_EQ(*num(f, "recommended_num_workers"), 2);
  EXPECT_NE(f.fix.find("the main process uses 0.6 of the 2 usable CPUs, which leaves 1.4"),
            std::string::npos)
      << f.fix;
  EXPECT_NE(f.fix.find("num_workers=2"), std::string::npos) << f.fix;
  EXPECT_NE(f.why.find("main process"), std::string::npos);
  // The heavy __getitem__ is reported too, but as a partial cause.
  const report::Finding* g = find(r->whole, "slow_getitem");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->severity, report::Severity::kWarning);
  EXPECT_EQ(Session::verdict(r->recent), "too_many_workers");
}

TEST(AnalyzeTooManyWorkers, AMostlyWaitingMainProcessLeavesTheWorkersMoreCpu) {
  Loader l = oversubscribed();
  // 2 - 0.7 = 1.3: the second worker gets 0.3 of a core.
  auto two = run(l, procs(l, 70.0, 33.0, 60.0, 200.0), 2);
  EXPECT_EQ(*num(*find(two->whole, "too_many_workers"), "recommended_num_workers"), 2);
  EXPECT_NEAR(*num(*find(two->whole, "too_many_workers"), "cpu_left_for_workers"), 1.3, 0.01);
  auto one = run(l, procs(l, 80.0, 33.0, 60.0, 200.0), 2);  // 1.2: it would get 0.2
  EXPECT_EQ(*num(*find(one->whole, "too_many_workers"), "recommended_num_workers"), 1);
  // Not measured: a whole core kept for the main process, floor(2) - 1.
  auto unmeasured = run(l, procs(l, std::nullopt, 33.0, 60.0, 200.0), 2);
  const report::Finding* u = find(unmeasured->whole, "too_many_workers");
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(*num(*u, "recommended_num_workers"), 1);
  EXPECT_NE(u->fix.find("floor(usable CPUs 2) - 1"), std::string::npos) << u->fix;
}

TEST(AnalyzeTooManyWorkers, FlipsAtRunQueueDelayThreshold) {
  Loader l = oversubscribed(0.45);
  auto below = run(l, procs(l, 60.0, 45.0, 19.9, 200.0), 2);
  EXPECT_EQ(find(below->whole, "too_many_workers"), nullptr);
  EXPECT_EQ(Session::verdict(below->whole), "slow_getitem");
  auto above = run(l, procs(l, 60.0, 45.0, 20.1, 200.0), 2);
  EXPECT_EQ(Session::verdict(above->whole), "too_many_workers");
}

TEST(AnalyzeTooManyWorkers, WithoutRunQueueDelayInvoluntarySwitchesProveIt) {
  Loader l = oversubscribed(0.6);
  auto below = run(l, procs(l, 60.0, 60.0, std::nullopt, 29.0), 2);
  EXPECT_EQ(find(below->whole, "too_many_workers"), nullptr);
  auto above = run(l, procs(l, 60.0, 60.0, std::nullopt, 31.0), 2);
  EXPECT_EQ(Session::verdict(above->whole), "too_many_workers");
}

TEST(AnalyzeTooManyWorkers, UnmeasuredContentionIsOnlyAWarning) {
  Loader l = oversubscribed(0.6);
  auto r = run(l, {}, 2);
  const report::Finding* f = find(r->whole, "too_many_workers");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, report::Severity::kWarning);
  EXPECT_EQ(*text(*f, "run_queue_delay_pct"), "unknown");
  EXPECT_EQ(*num(*f, "total_workers"), 6);  // counted from the workers' events
}

TEST(AnalyzeTooManyWorkers, NotWhenWorkersFitTheCpus) {
  Loader l = oversubscribed();
  l.num_workers = 2;
  l.fetch_ms = 100;
  auto r = run(l, procs(l, 60.0, 33.0, 60.0, 200.0), 2);
  EXPECT_EQ(find(r->whole, "too_many_workers"), nullptr);
}

TEST(AnalyzeTooManyWorkers, NotWhenTheLoaderKeepsUp) {
  Loader l = oversubscribed();
  l.fetch_ms = 60;  // 6 workers supply 100 batches/s, the loop wants 50
  auto r = run(l, procs(l, 60.0, 33.0, 60.0, 200.0), 2);
  EXPECT_TRUE(r->whole.empty()) << ids(r->whole).front();
}

TEST(AnalyzeTooManyWorkers, NotWhenUsableCpusAreUnknown) {
  Loader l = oversubscribed();
  auto r = run(l, procs(l, 60.0, 33.0, 60.0, 200.0), std::nullopt);
  EXPECT_EQ(find(r->whole, "too_many_workers"), nullptr);
}

TEST(AnalyzeTooManyWorkers, SplitsTheBudgetAcrossLoaders) {
  Session s;
  s.set_facts(facts(4));
  Loader a = oversubscribed(), b = oversubscribed();
  a.num_workers = 4;
  b.id = 1;
  b.num_workers = 2;
  b.worker_pid0 = 3000;
  feed(s, a, kT0, 20);
  feed(s, b, kT0, 20);
  std::vector<Proc> ps = procs(a, 60.0, 33.0, 60.0, 200.0);
  for (const Proc& p : procs(b, 60.0, 33.0, 60.0, 200.0))
    if (p.pid != b.main_pid) ps.push_back(p);
  feed_passes(s, kT0, 20, ps);
  auto fs = s.findings(0, Window::kWholeRun);
  ASSERT_FALSE(fs.empty());
  EXPECT_EQ(fs[0].id, "too_many_workers");
  EXPECT_EQ(fs[0].loader, -1);
  EXPECT_EQ(*num(fs[0], "total_workers"), 6);
  // 4 workers (4 usable - 0.6 main = 3.4) in proportion 4:2.
  EXPECT_NE(fs[0].fix.find("loader 0 num_workers=2"), std::string::npos) << fs[0].fix;
  EXPECT_NE(fs[0].fix.find("loader 1 num_workers=1"), std::string::npos) << fs[0].fix;
}

// Two ranks of one node (torchrun --nproc-per-node 2), three workers each: the node's workers
// are both ranks', and each rank's loader gets the same per-rank count.
std::unique_ptr<Run> two_ranks(int workers, double usable) {
  auto r = std::make_unique<Run>();
  r->s.set_facts(facts(usable));
  std::vector<Proc> ps;
  for (int rank = 0; rank < 2; ++rank) {
    Loader l = oversubscribed();
    l.id = uint16_t(rank + 1);
    l.num_workers = workers;
    l.main_pid = 1000 + 100 * rank;
    l.worker_pid0 = 2000 + 100 * rank;
    r->s.note_rank(l.id, RankId{rank, rank, 2, 2, 0});
    feed(r->s, l, kT0, 20);
    for (const Proc& p : procs(l, 60.0, 33.0, 60.0, 200.0)) ps.push_back(p);
  }
  feed_passes(r->s, kT0, 20, ps);
  r->whole = r->s.findings(0, Window::kWholeRun);
  return r;
}

TEST(AnalyzeTooManyWorkers, CountsEveryRanksWorkersAndPrescribesPerRank) {
  auto r = two_ranks(3, 2);
  ASSERT_EQ(Session::verdict(r->whole), "too_many_workers");
  const report::Finding& f = *find(r->whole, "too_many_workers");
  EXPECT_EQ(*num(f, "total_workers"), 6);  // 3 per rank, both ranks
  EXPECT_EQ(*num(f, "ranks"), 2);
  EXPECT_FALSE(num(f, "recommended_num_workers"));
  // (floor(2) - 2 main processes) / 2 ranks, at least 1: and even that oversubscribes.
  EXPECT_EQ(*num(f, "recommended_num_workers_per_rank"), 1);
  EXPECT_NE(f.fix.find("num_workers=1 in each rank's loader"), std::string::npos) << f.fix;
  EXPECT_NE(f.fix.find("Even that oversubscribes"), std::string::npos) << f.fix;
  EXPECT_NE(f.title.find("of 2 ranks"), std::string::npos) << f.title;
  EXPECT_EQ(f.loader, -1);  // about the node, not one rank
  EXPECT_EQ(f.rank, -1);
}

TEST(AnalyzeTooManyWorkers, PerRankCountFromTheCoresLeftAfterEveryMainProcess) {
  auto r = two_ranks(6, 8);
  const report::Finding* f = find(r->whole, "too_many_workers");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*num(*f, "total_workers"), 12);
  EXPECT_EQ(*num(*f, "recommended_num_workers_per_rank"), 3);  // (8 - 2) / 2
  EXPECT_EQ(f->fix.find("Even that"), std::string::npos) << f->fix;
}

}  // namespace
}  // namespace dldoctor::analyze
