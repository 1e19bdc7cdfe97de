// How a report is decided: severity, then tier, then score; the verdict is the top critical
// finding; a hang's diagnosis merged with the run's findings, a lost batch leading the hang
// it caused; "unknown" when there was nothing to diagnose.
#include "dldoctor_core/analyze/verdict.hpp"

#include <gtest/gtest.h>

#include "analyze_sim.hpp"
#include "dldoctor_core/analyze/data_bound.hpp"

namespace dldoctor::analyze {
namespace {

report::Finding finding(std::string id, report::Severity s, report::Tier t, double score) {
  report::Finding f;
  f.id = std::move(id);
  f.severity = s;
  f.tier = t;
  f.score = score;
  return f;
}

constexpr auto kCritical = report::Severity::kCritical;
constexpr auto kWarning = report::Severity::kWarning;
constexpr auto kInfo = report::Severity::kInfo;

TEST(AnalyzeVerdict, CriticalFirstThenScore) {
  std::vector<report::Finding> fs(4);
  fs[0].id = "main_process_bound";
  fs[0].severity = report::Severity::kInfo;
  fs[0].score = 1;
  fs[1].id = "slow_getitem";
  fs[1].severity = report::Severity::kWarning;
  fs[1].score = 0.9;
  fs[2].id = "io_bound";
  fs[2].severity = report::Severity::kCritical;
  fs[2].score = 0.2;
  fs[3].id = "slow_collate";
  fs[3].severity = report::Severity::kCritical;
  fs[3].score = 0.5;
  EXPECT_EQ(Session::verdict(fs), "slow_collate");
  order_findings(fs);
  EXPECT_EQ(sim::ids(fs), (std::vector<std::string>{"slow_collate", "io_bound", "slow_getitem",
                                                    "main_process_bound"}));
  EXPECT_EQ(Session::verdict({fs[1]}), "io_bound");
  EXPECT_EQ(Session::verdict({fs[2], fs[3]}), "healthy");
  EXPECT_EQ(Session::verdict({}), "healthy");
}

TEST(AnalyzeVerdict, TierRanksBeforeScoreWithinASeverity) {
  std::vector<report::Finding> fs = {
      finding("slow_getitem", kCritical, report::Tier::kMeasure, 0.9),
      finding("worker_died", kCritical, report::Tier::kDeath, 1),
      finding("shm_exhausted", kCritical, report::Tier::kFailure, 0),
      finding("worker_hang", kCritical, report::Tier::kHang, 60),
      finding("collate_deadlock", kCritical, report::Tier::kHangAwaited, 60),
      finding("main_process_bound", kInfo, report::Tier::kHang, 60),
      finding("fd_limit", kWarning, report::Tier::kMeasure, 0.8),
  };
  order_findings(fs);
  EXPECT_EQ(sim::ids(fs), (std::vector<std::string>{"collate_deadlock", "worker_hang",
                                                    "shm_exhausted", "worker_died", "slow_getitem",
                                                    "fd_limit", "main_process_bound"}));
  EXPECT_EQ(verdict(fs), "collate_deadlock");
  // Equal tier and score keep the rules' order.
  std::vector<report::Finding> tie = {
      finding("shm_exhausted", kCritical, report::Tier::kFailure, 0),
      finding("cuda_oom", kCritical, report::Tier::kFailure, 0)};
  order_findings(tie);
  EXPECT_EQ(sim::ids(tie), (std::vector<std::string>{"shm_exhausted", "cuda_oom"}));
}

TEST(AnalyzeVerdict, HangReplacesTheRunsFindingsOfItsIdsAndLeads) {
  std::vector<report::Finding> run = {
      finding("slow_getitem", kCritical, report::Tier::kMeasure, 0.9),
      finding("worker_died", kCritical, report::Tier::kDeath, 2),
      finding("main_process_bound", kInfo, report::Tier::kMeasure, 0.99),
  };
  std::vector<report::Finding> hang = {
      finding("worker_died", kCritical, report::Tier::kHangAwaited, 61),
      finding("worker_hang", kCritical, report::Tier::kHang, 61),
  };
  auto fs = with_hang(run, hang);
  EXPECT_EQ(sim::ids(fs), (std::vector<std::string>{"worker_died", "worker_hang", "slow_getitem",
                                                    "main_process_bound"}));
  EXPECT_EQ(fs[0].tier, report::Tier::kHangAwaited);  // the hang's, not the run's
  EXPECT_EQ(verdict(fs), "worker_died");
}

TEST(AnalyzeVerdict, ABatchLostByAWorkerLeadsTheHangItCaused) {
  auto lost = finding("shm_exhausted", kCritical, report::Tier::kFailure, 0);
  lost.add(kBatchesLost, 1.0);
  lost.why = "Why.";
  auto kept = finding("fd_limit", kCritical, report::Tier::kFailure, 0);  // lost nothing
  std::vector<report::Finding> hang = {
      finding("worker_hang", kCritical, report::Tier::kHangAwaited, 9)};
  auto fs = with_hang({lost, kept}, hang);
  EXPECT_EQ(sim::ids(fs), (std::vector<std::string>{"shm_exhausted", "worker_hang", "fd_limit"}));
  EXPECT_EQ(fs[0].tier, report::Tier::kLostBatchHang);
  EXPECT_NE(fs[0].why.find("The hang is its consequence"), std::string::npos) << fs[0].why;
  EXPECT_EQ(verdict(fs), "shm_exhausted");
  // Without a critical hang finding (the main process stuck elsewhere), nothing is promoted.
  std::vector<report::Finding> info = {
      finding("main_process_bound", kInfo, report::Tier::kHang, 9)};
  auto calm = with_hang({lost}, info);
  EXPECT_EQ(calm[0].tier, report::Tier::kFailure);
  EXPECT_EQ(calm[0].why, "Why.");
  // A warning that lost nothing is not the hang's cause either.
  auto risk = finding("fd_limit", kWarning, report::Tier::kMeasure, 0.8);
  risk.add(kBatchesLost, 0.0);
  EXPECT_EQ(with_hang({risk}, hang)[1].tier, report::Tier::kMeasure);
}

TEST(AnalyzeVerdict, UnknownOnlyWhenNothingWasSeen) {
  EXPECT_EQ(decide({}, false, false).verdict, "unknown");
  EXPECT_EQ(decide({}, true, false).verdict, "healthy");
  EXPECT_EQ(decide({}, false, true).verdict, "healthy");
  auto d = decide({finding("io_bound", kWarning, report::Tier::kMeasure, 0.3),
                   finding("slow_getitem", kCritical, report::Tier::kMeasure, 0.1)},
                  true, false);
  EXPECT_EQ(d.verdict, "slow_getitem");
  EXPECT_EQ(sim::ids(d.findings), (std::vector<std::string>{"slow_getitem", "io_bound"}));
  EXPECT_EQ(decide({}, false, false).note, kNoLoaderNote);
  EXPECT_EQ(decide({}, true, false).note, "");
}

TEST(AnalyzeVerdict, TooShortARunIsNotHealthy) {
  // Not healthy without evidence: unknown, saying why; a critical finding still names the
  // verdict (a crash after 3 batches is known), and a hang is diagnosed however short.
  auto d = decide({finding("io_bound", kWarning, report::Tier::kMeasure, 0.3)}, true, false,
                  "too short to judge: ...");
  EXPECT_EQ(d.verdict, "unknown");
  EXPECT_EQ(d.note, "too short to judge: ...");
  EXPECT_EQ(decide({finding("loader_error", kCritical, report::Tier::kFailure, 0)}, true, false,
                   "too short to judge: ...")
                .verdict,
            "loader_error");
  EXPECT_EQ(decide({}, false, true, "too short to judge: ...").verdict, "healthy");
}

TEST(AnalyzeVerdict, TooShortAtTheDataBoundGatesEdges) {
  // kMinSteadyBatches consumer steps and kMinJudgedLoopS of loop: one batch or a few ms short
  // of either is too short, and the sentence gives the figures and what is needed.
  auto note_after = [](double seconds, double step_ms) {
    sim::Loader l;
    l.step_ms = step_ms;
    Session s;
    s.set_facts(sim::facts(8));
    sim::feed(s, l, sim::kT0, seconds);
    return too_short_to_judge(s.view(0, Window::kWholeRun));
  };
  EXPECT_EQ(note_after(20, 20), "");
  const std::string short_loop = note_after(1.0, 20);
  EXPECT_NE(short_loop.find("too short to judge"), std::string::npos) << short_loop;
  EXPECT_NE(short_loop.find("at least 5 batches and 2 s of loop"), std::string::npos) << short_loop;
  EXPECT_EQ(note_after(2.3, 20), "");            // over 2 s of loop, dozens of batches
  EXPECT_NE(note_after(2.3, 600), "");           // over 2 s, but only 4 steps: too few batches
  EXPECT_EQ(note_after(3.5, 600), "");           // 6 steps of 0.6 s
  EXPECT_EQ(too_short_to_judge(JobView{}), "");  // no loader: that is kNoLoaderNote's case
}

TEST(AnalyzeVerdict, ALoopThatWaitsIsNotHealthyWhenNoRuleNamesWhy) {
  // Workers that fetch in 2 ms for a 20 ms step: the pipeline keeps up, no rule takes the
  // wait up. Nine batches in ten are ready (0.5 ms to hand over), the tenth waits 60 ms (a
  // new shard, a pause): 23% of the loop waits for batches not yet made, not healthy, the
  // note says so. Every batch taking 3 ms to hand over (13% of the loop, all of it the
  // hand-over) has no stall beyond it, nor has a loop 4.9% beyond its hand-over. The tenth batch is made
  // only as it is handed out: its whole wait is for the worker (a wait of 1 ms or more is
  // split at its batch's fetch end).
  auto run = [](std::vector<double> waits, double seconds = 20, bool made_before = false) {
    sim::Loader l;
    l.fetch_ms = 2;
    l.wait_pattern_ms = std::move(waits);
    l.made_before_asked = made_before;
    Session s;
    s.set_facts(sim::facts(8));
    sim::feed(s, l, sim::kT0, seconds);
    std::string why;
    auto findings = s.findings(0, Window::kWholeRun, why);
    return std::pair{decide(std::move(findings), true, false, why), why};
  };
  std::vector<double> pauses(9, 0.5);
  pauses.push_back(60);
  auto [stalled, why] = run(pauses);
  EXPECT_EQ(stalled.verdict, "unknown");
  EXPECT_EQ(stalled.note, why);
  EXPECT_NE(why.find("loader 0 waits for batches not yet made 23% of its time (24% in all, "
                     "less the 0.5 ms a ready batch takes to hand over"),
            std::string::npos)
      << why;
  // Every batch ready and taking 3 ms to hand over: no stall beyond the hand-over, so no
  // note; the hand-over itself, 13% of the loop, is slow_handover's.
  auto [handover, none] = run({3.0}, 20, true);
  EXPECT_EQ(handover.verdict, "slow_handover");
  EXPECT_EQ(none, "");
  std::vector<double> edge(9, 0.5);
  edge.push_back(10.5);  // 1.05 ms a batch beyond the hand-over: 1.05 / 21.5 = 4.9%
  EXPECT_EQ(run(edge).second, "");
  edge.back() = 11.5;  // 5.3%
  EXPECT_NE(run(edge).second, "");
  // Batches of many tensors, each a descriptor to receive and map: every one was made
  // before the consumer asked, and handing it over takes 4 ms, some 8-12 (one wait in ten
  // at its quickest, 4 ms, is no measure of the others). All of the wait is the hand-over:
  // no stall beyond it (the quickest tenth would have called 7% of the loop one), so no
  // note; the hand-over is slow_handover's.
  std::vector<double> uneven(7, 4.0);
  for (double w : {8.0, 10.0, 12.0}) uneven.push_back(w);
  auto [ready, quiet] = run(uneven, 20, true);
  EXPECT_EQ(ready.verdict, "slow_handover");
  EXPECT_EQ(quiet, "");
  // The same waits for batches made only as they are handed out are waits for the workers.
  EXPECT_NE(run(uneven).second.find("not healthy, cause not named"), std::string::npos);
  // Too short says so first.
  EXPECT_NE(run(pauses, 1.0).second.find("too short"), std::string::npos);
}

}  // namespace
}  // namespace dldoctor::analyze
