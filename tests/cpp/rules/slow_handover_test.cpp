// slow_handover at the edges of its thresholds: a loop that waits for batches its workers
// had already made (the wait after each batch's fetch ended), against one that waits for
// batches not yet made, hand-overs too quick to be measured, and the sharing strategy the fix
// depends on.
#include "dldoctor_core/analyze/rules/slow_handover.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"
#include "dldoctor_core/analyze/verdict.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

/// A loader whose workers fetch in 2 ms for a 20 ms step (they keep up), each wait `wait_ms`.
Loader ready(double wait_ms, bool made_before = true) {
  Loader l;
  l.fetch_ms = 2;
  l.wait_ms = wait_ms;
  l.made_before_asked = made_before;
  return l;
}

/// As ready(), batch i waiting waits_ms[i % size].
Loader ready_in_turn(std::vector<double> waits_ms) {
  Loader l = ready(0);
  l.wait_ms.reset();
  l.wait_pattern_ms = std::move(waits_ms);
  return l;
}

std::vector<report::Finding> findings(const Loader& l, std::string strategy = "") {
  Session s;
  s.set_facts(facts(8));
  if (!strategy.empty()) s.note(runtime(1 << 20, strategy));
  feed(s, l, kT0, 20);
  return s.findings(0, Window::kWholeRun);
}

TEST(AnalyzeSlowHandover, WaitsForBatchesAlreadyMadeAreNamed) {
  auto fs = findings(ready(4.0));  // 4 / 24 ms: 17% of the loop
  ASSERT_EQ(ids(fs), std::vector<std::string>{"slow_handover"});
  const report::Finding& f = fs[0];
  EXPECT_EQ(f.severity, report::Severity::kCritical);
  EXPECT_EQ(f.loader, 0);
  EXPECT_NEAR(*num(f, "handover_ms"), 4.0, 0.01);
  EXPECT_NEAR(*num(f, "handover_fraction"), 4.0 / 24, 0.002);
  EXPECT_NEAR(*num(f, "stall_beyond_handover_fraction"), 0, 0.002);
  EXPECT_GT(*num(f, "handover_measured_batches"), 700);
  EXPECT_EQ(*text(f, "sharing_strategy"), "unknown");
  EXPECT_NE(f.title.find("Loader 0: the loop waits 16.7% of its time for batches its workers "
                         "have ready: handing one over to the main process takes 4 ms"),
            std::string::npos)
      << f.title;
  EXPECT_NE(f.fix.find("set_sharing_strategy('file_system')"), std::string::npos) << f.fix;
  EXPECT_NE(f.fix.find("fewer, larger tensors"), std::string::npos) << f.fix;
  EXPECT_NEAR(*num(f, "fetch_mean_ms"), 2.0, 0.01);
  // Not num_workers=0, though a worker makes a batch in half its hand-over: at num_workers=0
  // the loop waits for each fetch, and slow_getitem would send it back to workers.
  EXPECT_EQ(f.fix.find("num_workers"), std::string::npos) << f.fix;
  EXPECT_NE(f.why.find("already made"), std::string::npos) << f.why;
  EXPECT_NE(f.why.find("GIL"), std::string::npos) << f.why;
  EXPECT_EQ(Session::verdict(fs), "slow_handover");
}

TEST(AnalyzeSlowHandover, FlipsAtTheDataStallThreshold) {
  Loader l = ready(2.6);
  l.step_ms = 50;
  EXPECT_TRUE(findings(l).empty());  // 2.6 / 52.6 ms: 4.94%
  l.wait_ms = 2.7;
  EXPECT_EQ(ids(findings(l)), std::vector<std::string>{"slow_handover"});  // 5.1%
}

TEST(AnalyzeSlowHandover, FlipsAtTheLeastHandOverPerBatch) {
  // A 10 ms step: 1.95 ms a batch is 16% of the loop, but what one tensor or a few cost.
  Loader l = ready(1.95);
  l.step_ms = 10;
  EXPECT_TRUE(findings(l).empty());
  l.wait_ms = 2.05;
  EXPECT_EQ(ids(findings(l)), std::vector<std::string>{"slow_handover"});
}

TEST(AnalyzeSlowHandover, WorkersShortOfDemandAreTheLimitNotTheHandOver) {
  // 2 workers at 100 ms a batch supply 20 batches/s to a loop that wants 50: the wait is
  // theirs whatever part of it follows a batch's fetch end (a worker busy in Python delays
  // its batches' hand-over, which then takes up the same wait).
  Loader l = ready(4.0);
  l.fetch_ms = 100;
  for (const auto& f : findings(l)) EXPECT_NE(f.id, "slow_handover");
}

/// `l` for 20 s with sampler passes: the main process queued for a CPU `main_runq`% of the
/// time, the workers `worker_runq`%, and the machine's CPUs stolen `steal`%.
/// `main_per_slice_us`/`worker_per_slice_us`: each one's wait for a core each time it was given
/// one (empty: unknown, as on a kernel without schedstat's third field).
std::vector<report::Finding> on_a_busy_machine(
    const Loader& l, double main_runq, std::optional<double> worker_runq,
    std::optional<double> steal, std::optional<double> main_per_slice_us = std::nullopt,
    std::optional<double> worker_per_slice_us = std::nullopt) {
  Session s;
  s.set_facts(facts(8));
  feed(s, l, kT0, 20);
  std::vector<Proc> ps = procs(l, 30.0, 10.0, worker_runq);
  ps[0].runq_delay_pct = main_runq;
  ps[0].runq_wait_per_slice_us = main_per_slice_us;
  for (size_t i = 1; i < ps.size(); ++i) ps[i].runq_wait_per_slice_us = worker_per_slice_us;
  sample::MachineSample m;
  m.cpu_busy_pct = 40;
  m.cpu_steal_pct = steal;
  feed_passes(s, kT0, 20, ps, m);
  return s.findings(0, Window::kWholeRun);
}

TEST(AnalyzeSlowHandover, TheMainProcessQueuedForACpuIsTheMachineNotTheHandOver) {
  // 4 ms of hand-over on a 24 ms loop; the main process queued for a CPU 14% of the time
  // (3.4 ms a batch): 0.6 ms left, no finding. At 4% (1 ms a batch) 3 ms are left: named,
  // with the queueing in its evidence.
  for (const auto& f : on_a_busy_machine(ready(4.0), 14, {}, {}))
    EXPECT_NE(f.id, "slow_handover");
  const auto fs = on_a_busy_machine(ready(4.0), 4, {}, {});
  ASSERT_EQ(ids(fs), std::vector<std::string>{"slow_handover"});
  EXPECT_NEAR(*num(fs[0], "run_queue_ms_per_batch"), 0.96, 0.02);
  EXPECT_FALSE(num(fs[0], "cpu_steal_ms_per_batch"));
}

TEST(AnalyzeSlowHandover, WorkersQueuedForACpuAreTheMachineNotTheHandOver) {
  // The worker thread that answers for a batch's tensors waits for a core as well: the more
  // queued of the main process and the workers is taken off.
  for (const auto& f : on_a_busy_machine(ready(4.0), 1, 14.0, {}))
    EXPECT_NE(f.id, "slow_handover");
  const auto fs = on_a_busy_machine(ready(4.0), 1, 4.0, {});
  ASSERT_EQ(ids(fs), std::vector<std::string>{"slow_handover"});
  EXPECT_NEAR(*num(fs[0], "run_queue_ms_per_batch"), 0.96, 0.02);
}

TEST(AnalyzeSlowHandover, AStepThatFillsTheCoresQueuesItsOwnThreadsNotTheHandOver) {
  // A step of torch ops on two threads keeps both cores busy: the main process queues 14% of
  // the loop (3.4 ms a batch), but a thread woken for the batch's round trips waits 70 µs
  // for a core, a worker's 60: a few wake-ups of each side, 0.52 ms, are the machine's.
  // A batch of eight tensors measured so: file_system, or one stacked tensor, made that loop
  // 8% faster. Woken threads that wait 1 ms each (beside CPU burners) still take it all.
  const auto fs = on_a_busy_machine(ready(4.0), 14, 4.0, {}, 70, 60);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"slow_handover"});
  EXPECT_NEAR(*num(fs[0], "run_queue_ms_per_batch"), 0.52, 0.01);
  for (const auto& f : on_a_busy_machine(ready(4.0), 14, 4.0, {}, 1000, 60))
    EXPECT_NE(f.id, "slow_handover");
  // The lower of the two: a loop queued 1% (0.24 ms a batch) loses no more to slow wake-ups.
  const auto quiet = on_a_busy_machine(ready(4.0), 1, 1.0, {}, 1000, 1000);
  ASSERT_EQ(ids(quiet), std::vector<std::string>{"slow_handover"});
  EXPECT_NEAR(*num(quiet[0], "run_queue_ms_per_batch"), 0.24, 0.01);
  // One side's figure unknown: the whole loop's queueing, as before.
  for (const auto& f : on_a_busy_machine(ready(4.0), 14, 4.0, {}, 70, std::nullopt))
    EXPECT_NE(f.id, "slow_handover");
}

TEST(AnalyzeSlowHandover, CpuTimeStolenByTheHypervisorIsTheMachineNotTheHandOver) {
  // A virtual machine whose CPUs the hypervisor does not run stalls every process without
  // a run queue to show it. 14% stolen (3.4 ms of a 24 ms loop) plus 1% queued: under 2 ms
  // left. 4% stolen: named, the steal in the evidence.
  for (const auto& f : on_a_busy_machine(ready(4.0), 1, {}, 14.0))
    EXPECT_NE(f.id, "slow_handover");
  const auto fs = on_a_busy_machine(ready(4.0), 1, {}, 4.0);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"slow_handover"});
  EXPECT_NEAR(*num(fs[0], "cpu_steal_ms_per_batch"), 0.96, 0.02);
  EXPECT_NEAR(*num(fs[0], "run_queue_ms_per_batch"), 0.24, 0.01);
}

TEST(AnalyzeSlowHandover, AFewHugeStallsAreNotASlowHandOver) {
  // Eleven hand-overs in twelve take 1.2 ms, the twelfth 80 ms (the main process stalled by
  // its host): 7.7 ms a batch on the mean, 27% of the loop, but the typical batch crosses in
  // 1.2 ms. The same mean on every batch is named.
  std::vector<double> waits(11, 1.2);
  waits.push_back(80);
  for (const auto& f : findings(ready_in_turn(waits))) EXPECT_NE(f.id, "slow_handover");
  const auto fs = findings(ready(7.7));
  ASSERT_EQ(ids(fs), std::vector<std::string>{"slow_handover"});
  EXPECT_NEAR(*num(fs[0], "handover_measured_p50_ms"), 7.7, 0.01);
  // Half of the hand-overs slow is enough: the median is theirs.
  EXPECT_EQ(ids(findings(ready_in_turn({1.2, 7.7}))), std::vector<std::string>{"slow_handover"});
}

TEST(AnalyzeSlowHandover, NamedOnlyOnceEnoughHandOversAreMeasured) {
  // A 100 ms step and 8 ms hand-overs: 108 ms a batch. The first batch fills the pipeline,
  // so 3.3 s give 30 measured hand-overs, 3.2 s 29: too few to name.
  auto run = [](double seconds) {
    Loader l = ready(8.0);
    l.step_ms = 100;
    Session s;
    s.set_facts(facts(8));
    feed(s, l, kT0, seconds);
    return s.findings(0, Window::kWholeRun);
  };
  for (const auto& f : run(3.2)) EXPECT_NE(f.id, "slow_handover");
  const auto fs = run(3.3);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"slow_handover"});
  EXPECT_EQ(*num(fs[0], "handover_measured_batches"), slow_handover::kMinMeasuredBatches);
}

TEST(AnalyzeSlowHandover, WaitsForBatchesNotYetMadeAreTheWorkersNotTheHandOver) {
  for (const auto& f : findings(ready(4.0, false))) EXPECT_NE(f.id, "slow_handover");
}

TEST(AnalyzeSlowHandover, HandOversTooQuickToMeasureAreNotNamed) {
  // Nine waits in ten of 0.9 ms and one of 21 ms (2.9 ms a batch, 13% of the 20 ms loop):
  // only a tenth of the waits reach the 1 ms at which a wait is split at its batch's fetch
  // end, and the quickest-tenth estimate of the others is not a measurement.
  std::vector<double> waits(9, 0.9);
  waits.push_back(21);
  for (const auto& f : findings(ready_in_turn(waits))) EXPECT_NE(f.id, "slow_handover");
}

TEST(AnalyzeSlowHandover, TheFixFollowsTheSharingStrategy) {
  const auto fd = findings(ready(4.0), "file_descriptor");
  ASSERT_EQ(ids(fd), std::vector<std::string>{"slow_handover"});
  EXPECT_EQ(*text(fd[0], "sharing_strategy"), "file_descriptor");
  EXPECT_NE(fd[0].fix.find("file_system"), std::string::npos);
  const auto fs = findings(ready(4.0), "file_system");
  ASSERT_EQ(ids(fs), std::vector<std::string>{"slow_handover"});
  EXPECT_EQ(fs[0].fix.find("set_sharing_strategy"), std::string::npos) << fs[0].fix;
  EXPECT_NE(fs[0].fix.find("fewer, larger tensors"), std::string::npos) << fs[0].fix;
  EXPECT_EQ(fs[0].why.find("GIL"), std::string::npos) << fs[0].why;
}

TEST(AnalyzeSlowHandover, PinMemoryIsPartOfTheHandOver) {
  Loader l = ready(4.0);
  l.flags |= trace::kPinMemory;
  const auto fs = findings(l);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"slow_handover"});
  EXPECT_NE(fs[0].fix.find("pin_memory=False"), std::string::npos) << fs[0].fix;
}

TEST(AnalyzeSlowHandover, ASingleProcessLoaderHasNoHandOver) {
  Loader l = ready(4.0);
  l.num_workers = 0;
  for (const auto& f : findings(l)) EXPECT_NE(f.id, "slow_handover");
}

}  // namespace
}  // namespace dldoctor::analyze
