// main_process_bound at the edges of its threshold while the job runs (the loader keeps up, the
// main process computes), and at a hang (the training loop stuck outside the loader).
#include "dldoctor_core/analyze/rules/main_process_bound.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"
#include "../hang_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;
using namespace hang_sim;

TEST(AnalyzeMainProcessBound, BusyMainProcessWithLoaderKeepingUpIsInfoOnly) {
  Loader l;
  auto r = run(l, procs(l, 98.0, 5.0, 1.0, 2.0), 8);
  ASSERT_EQ(r->whole.size(), 1u);
  EXPECT_EQ(r->whole[0].id, "main_process_bound");
  EXPECT_EQ(r->whole[0].severity, report::Severity::kInfo);
  EXPECT_EQ(r->whole[0].loader, 0);
  EXPECT_NEAR(*num(r->whole[0], "main_process_cpu_pct"), 98.0, 1e-9);
  EXPECT_EQ(Session::verdict(r->whole), "healthy");
  ASSERT_EQ(r->recent.size(), 1u);
  EXPECT_EQ(r->recent[0].id, "main_process_bound");
}

TEST(AnalyzeMainProcessBound, FlipsAtBusyCpuThreshold) {
  Loader l;
  // The main process wants a CPU for cpu % + run-queue % (the simulation's main waits 1%).
  EXPECT_TRUE(run(l, procs(l, 78.9, 5.0), 8)->whole.empty());
  EXPECT_EQ(ids(run(l, procs(l, 79.1, 5.0), 8)->whole),
            std::vector<std::string>{"main_process_bound"});
}

TEST(AnalyzeMainProcessBound, UnknownMainCpuSaysNothing) {
  Loader l;
  EXPECT_TRUE(run(l, procs(l, std::nullopt, std::nullopt), 8)->whole.empty());
  EXPECT_TRUE(run(l, {}, 8)->whole.empty());
}

TEST(WatchdogRules, MainOutsideLoaderIsInfoOnly) {
  auto snap = snapshot({process(100, -1, -1, kMainInStep, "S", "futex"),
                        process(101, 0, 0, kWorkerIdle, "S", "poll"),
                        process(102, 0, 1, kWorkerIdle, "S", "poll")});
  auto findings = classify_hang(snap, context("fork", 2));
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].id, "main_process_bound");
  EXPECT_EQ(findings[0].severity, Severity::kInfo);
  EXPECT_EQ(count_critical(findings), 0);
  EXPECT_NE(findings[0].title.find("training loop itself is stuck"), std::string::npos);
  EXPECT_NE(findings[0].title.find("/home/u/train.py:41 in sync_step"), std::string::npos);
  auto top = text(findings[0], "top_frames");
  ASSERT_TRUE(top.has_value());
  EXPECT_NE(top->find("train.py:57 in train"), std::string::npos);
}

}  // namespace
}  // namespace dldoctor::analyze
