// straggler_rank at the edges of its thresholds: the other ranks' steps must carry the gating
// rank's wait (kWaitShownShare), their own stall must stay below its share (kOthersStallShare);
// the cause is the finding about the gating rank's loader, and stays the verdict; heavier
// samples on one rank ask for rebalanced shards.
#include "dldoctor_core/analyze/rules/straggler_rank.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

/// Rank 1 waits 30 ms for each batch (two workers of 100 ms against a 20 ms step); rank 0's
/// loader keeps up and its step is its own 20 ms plus `waits_ms` in the all-reduce.
struct TwoRanks {
  Loader slow = cpu_bound(2);
  Loader fast = cpu_bound(8);  // the same samples, enough workers: 12.5 ms a batch
  std::unique_ptr<Run> run(double waits_ms, std::optional<double> fast_wait_ms = std::nullopt,
                           bool ranks = true) {
    slow.id = 2, slow.main_pid = 1100, slow.worker_pid0 = 2100;
    fast.id = 1, fast.main_pid = 1000, fast.worker_pid0 = 2000;
    fast.step_ms = 20 + waits_ms;
    fast.wait_ms = fast_wait_ms;
    auto r = std::make_unique<Run>();
    r->s.set_facts(facts(16));
    if (ranks) {
      r->s.note_rank(fast.id, RankId{0, 0, 2, 2, 0});
      r->s.note_rank(slow.id, RankId{1, 1, 2, 2, 0});
    }
    feed(r->s, fast, kT0, 20);
    const int64_t end = feed(r->s, slow, kT0, 20);
    std::vector<Proc> ps = procs(slow, 30.0, 95.0, 1.0, 3.0);
    for (const Proc& p : procs(fast, 3.0, 40.0, 1.0, 3.0)) ps.push_back(p);
    feed_passes(r->s, kT0, 20, ps);
    r->whole = r->s.findings(0, Window::kWholeRun);
    r->recent = r->s.findings(end, Window::kRecent);
    return r;
  }
};

TEST(AnalyzeStragglerRank, TheGatingRankIsNamedWithItsCauseWhichStaysTheVerdict) {
  TwoRanks t;
  auto r = t.run(30);
  ASSERT_EQ(ids(r->whole), (std::vector<std::string>{"slow_getitem", "straggler_rank"}));
  EXPECT_EQ(Session::verdict(r->whole), "slow_getitem");
  EXPECT_EQ(Session::verdict(r->recent), "slow_getitem");
  const report::Finding& cause = r->whole[0];
  EXPECT_EQ(cause.rank, 1);
  EXPECT_EQ(cause.title.rfind("Rank 1 \xc2\xb7 loader 1:", 0), 0u) << cause.title;
  const report::Finding& f = r->whole[1];
  EXPECT_EQ(f.severity, report::Severity::kCritical);
  EXPECT_EQ(f.rank, 1);
  EXPECT_EQ(f.loader, 2);
  EXPECT_EQ(*num(f, "gating_rank"), 1);
  EXPECT_EQ(*text(f, "cause"), "slow_getitem");
  EXPECT_EQ(*text(f, "waiting_ranks"), "0");
  EXPECT_NEAR(*num(f, "data_stall_fraction"), 0.6, 1e-6);
  EXPECT_NEAR(*num(f, "others_wait_per_step_ms"), 30, 1e-6);
  EXPECT_NEAR(*num(f, "others_lost_fraction"), 0.6, 1e-6);  // 30 of its 50 ms loop
  EXPECT_EQ(*text(f, "waiting_ranks_main_cpu_pct"), "0: 3%");
  EXPECT_NE(f.fix.find(cause.fix), std::string::npos) << f.fix;    // that rank's own fix
  EXPECT_EQ(f.fix.find("Rebalance"), std::string::npos) << f.fix;  // the same samples
  EXPECT_NE(f.title.find("rank 0 waits for it"), std::string::npos) << f.title;
  // The waiting rank is never called main-process bound.
  EXPECT_EQ(find(r->whole, "main_process_bound"), nullptr);
}

TEST(AnalyzeStragglerRank, FlipsAtTheShareOfTheWaitTheOthersStepsShow) {
  TwoRanks below;
  EXPECT_EQ(find(below.run(14.9)->whole, "straggler_rank"), nullptr);  // < 0.5 x 30 ms
  TwoRanks above;
  EXPECT_NE(find(above.run(15.1)->whole, "straggler_rank"), nullptr);
}

TEST(AnalyzeStragglerRank, FlipsAtTheShareTheOthersLose) {
  // Rank 1 waits 3 ms a batch (two 46 ms fetches against a 20 ms step); rank 0 steps 20 ms
  // plus its wait x: x / (20 + x) of its loop lost, kMinLostShare = 0.1 at x = 2.22 ms.
  TwoRanks below;
  below.slow.fetch_ms = 46;
  EXPECT_EQ(find(below.run(2.1)->whole, "straggler_rank"), nullptr);
  TwoRanks above;
  above.slow.fetch_ms = 46;
  EXPECT_NE(find(above.run(2.4)->whole, "straggler_rank"), nullptr);
}

TEST(AnalyzeStragglerRank, FlipsAtTheOthersOwnStall) {
  // Rank 0's own stall w / (w + 50): at most half of rank 1's 0.6.
  TwoRanks below;
  EXPECT_NE(find(below.run(30, 21.0)->whole, "straggler_rank"), nullptr);  // 0.296
  TwoRanks above;
  EXPECT_EQ(find(above.run(30, 22.0)->whole, "straggler_rank"), nullptr);  // 0.306
}

TEST(AnalyzeStragglerRank, HeavierSamplesOnOneRankAskForRebalancedShards) {
  TwoRanks t;
  t.fast.fetch_ms = 40;  // 4x cheaper samples than rank 1's, 8 workers keep up
  t.fast.collate_ms = 1;
  auto r = t.run(30);
  const report::Finding* f = find(r->whole, "straggler_rank");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->fix.rfind("Rebalance the shards", 0), 0u) << f->fix;
  EXPECT_GT(*num(*f, "getitem_p50_ms"), 1.5 * *num(*f, "others_getitem_p50_ms"));
}

TEST(AnalyzeStragglerRank, NoRanksNoStraggler) {
  // The same two loaders in one process (no rank): each is judged alone.
  TwoRanks t;
  auto r = t.run(30, std::nullopt, false);
  EXPECT_EQ(find(r->whole, "straggler_rank"), nullptr);
  EXPECT_EQ(Session::verdict(r->whole), "slow_getitem");
  EXPECT_EQ(r->whole[0].rank, -1);
  EXPECT_EQ(r->whole[0].title.rfind("Loader 2:", 0), 0u) << r->whole[0].title;
}

}  // namespace
}  // namespace dldoctor::analyze
