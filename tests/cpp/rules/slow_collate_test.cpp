// slow_collate: a CPU-bound fetch whose larger part is collate_fn, split from slow_getitem at
// the collate share.
#include "dldoctor_core/analyze/rules/slow_collate.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"
#include "../attach_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

TEST(AnalyzeSlowCollate, CollateHeavyFetch) {
  Loader l = cpu_bound();
  l.collate_ms = 80;
  auto r = run(l, procs(l, 30.0, 95.0, 1.0, 3.0), 8);
  ASSERT_EQ(ids(r->whole), std::vector<std::string>{"slow_collate"});
  const report::Finding& f = r->whole[0];
  EXPECT_EQ(f.severity, report::Severity::kCritical);
  EXPECT_NEAR(*num(f, "collate_share"), 0.8, 0.01);
  EXPECT_NEAR(*num(f, "collate_p50_ms"), 80, 1e-6);
  EXPECT_NE(f.fix.find("collate_fn"), std::string::npos);
  EXPECT_EQ(Session::verdict(r->whole), "slow_collate");
}

TEST(AnalyzeSlowCollate, FlipsAtCollateShare) {
  Loader l = cpu_bound();
  l.jitter = 0;
  l.collate_ms = 49;
  EXPECT_EQ(Session::verdict(run(l, procs(l, 30.0, 95.0, 1.0), 8)->whole), "slow_getitem");
  l.collate_ms = 51;
  EXPECT_EQ(Session::verdict(run(l, procs(l, 30.0, 95.0, 1.0), 8)->whole), "slow_collate");
}

TEST(AnalyzeSlowCollate, NoWorkersForALoopFasterThanWorkersHandOver) {
  // num_workers=0, tiny batches: collate_fn is most of a 40 us fetch, and the loop wants
  // 25,000 batches/s. Workers could not hand over that many (kMaxWorkerHandoutsPerS): the
  // fix is bigger batches, never "Set num_workers=1".
  Loader l = cpu_bound(0);
  l.jitter = 0;
  l.fetch_ms = 0.04;
  l.collate_ms = 0.03;
  l.step_ms = 0.04;
  auto r = run(l, procs(l, 99.0, std::nullopt), 8);
  const report::Finding* f = find(r->whole, "slow_collate");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(num(*f, "recommended_num_workers"), std::nullopt);
  EXPECT_EQ(f->fix.find("Set num_workers"), std::string::npos) << f->fix;
  EXPECT_NE(f->fix.find("Workers would not help"), std::string::npos) << f->fix;
  EXPECT_NE(f->fix.find("larger batch_size (now 32)"), std::string::npos) << f->fix;
  // The same fetch at 50 batches/s: workers can hand that over, and are prescribed.
  l.fetch_ms = 16;
  l.collate_ms = 12;
  l.step_ms = 4;
  r = run(l, procs(l, 99.0, std::nullopt), 8);
  f = find(r->whole, "slow_collate");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->fix.find("Set num_workers="), std::string::npos) << f->fix;
}

TEST(AnalyzeSlowCollate, StackProofSplitsByTheCollateShare) {
  namespace a = attach_sim;
  const auto fs = run_rules(a::job_of(a::stacked(0.7, 0.02, 0.38, 0.6)));
  EXPECT_NE(find(fs, "slow_collate"), nullptr);
  EXPECT_EQ(find(fs, "slow_getitem"), nullptr);
  const auto other = run_rules(a::job_of(a::stacked(0.7, 0.02, 0.6, 0.38)));
  EXPECT_EQ(find(other, "slow_collate"), nullptr);
  EXPECT_NE(find(other, "slow_getitem"), nullptr);
}

}  // namespace
}  // namespace dldoctor::analyze
