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

/// A 50 ms CPU-bound step fed by workers that make each batch in 2 ms, each wait `wait_ms`:
/// for a batch made before it was asked for (its hand-over), or for one made just then.
Loader busy_step(double wait_ms, bool made_before) {
  Loader l;
  l.fetch_ms = 2;
  l.step_ms = 50;
  l.wait_ms = wait_ms;
  l.made_before_asked = made_before;
  return l;
}

TEST(AnalyzeMainProcessBound, AWaitThatIsAllHandOverStillKeepsUp) {
  // 4.6 ms a batch for ready batches: 8.4% of the loop, all of it hand-over. The workers wait
  // 6% of the time for a CPU, which slow_handover counts against the hand-over (3.3 ms of
  // the 4.6): too little left to name. The loader makes its batches in time and the main
  // process computes: main_process_bound, as the verdict (healthy) says.
  Loader l = busy_step(4.6, true);
  auto r = run(l, procs(l, 98.0, 5.0, 6.0), 8);
  ASSERT_EQ(ids(r->whole), std::vector<std::string>{"main_process_bound"});
  const report::Finding& f = r->whole[0];
  EXPECT_NEAR(*num(f, "data_stall_fraction"), 4.6 / 54.6, 0.002);
  EXPECT_NEAR(*num(f, "stall_beyond_handover_fraction"), 0, 0.002);
  EXPECT_NE(f.why.find("0% of the loop was for batches not yet made"), std::string::npos) << f.why;
  EXPECT_EQ(Session::verdict(r->whole), "healthy");
}

TEST(AnalyzeMainProcessBound, SilentBesideASlowHandOver) {
  // The same wait on a machine with CPUs to spare: slow_handover names it and prescribes a
  // loader setting; "leave the DataLoader as it is" beside it would contradict it.
  Loader l = busy_step(4.6, true);
  EXPECT_EQ(ids(run(l, procs(l, 98.0, 5.0), 8)->whole),
            std::vector<std::string>{"slow_handover"});
}

TEST(AnalyzeMainProcessBound, AWaitForBatchesNotYetMadeIsNotTheStep) {
  Loader l = busy_step(4.6, false);
  for (const auto& f : run(l, procs(l, 98.0, 5.0, 6.0), 8)->whole)
    EXPECT_NE(f.id, "main_process_bound");
}

TEST(AnalyzeMainProcessBound, AShortWaitNamesNoHandOverShare) {
  // 5 ms of step in 98% of a core and waits of 1%: the "why" does not split them.
  Loader l;
  auto r = run(l, procs(l, 98.0, 5.0, 1.0, 2.0), 8);
  ASSERT_EQ(ids(r->whole), std::vector<std::string>{"main_process_bound"});
  EXPECT_EQ(r->whole[0].why.find("not yet made"), std::string::npos) << r->whole[0].why;
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
