// slow_getitem at the edges of its thresholds: capacity against demand, the workers the idle
// CPUs allow, the hot step named from profiles; the hot-step helper itself.
#include "dldoctor_core/analyze/rules/slow_getitem.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"
#include "../attach_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

TEST(AnalyzeSlowGetitem, IdleCoresGiveAWorkerCount) {
  Loader l = cpu_bound();
  auto r = run(l, procs(l, 30.0, 95.0, 1.0, 3.0), 8);
  ASSERT_EQ(ids(r->whole), std::vector<std::string>{"slow_getitem"});
  const report::Finding& f = r->whole[0];
  EXPECT_EQ(f.severity, report::Severity::kCritical);
  EXPECT_EQ(f.loader, 0);
  // ceil(50 batches/s x 0.1 s x 1.1 headroom) = 6, within 2 + (8 - 2 - 1) idle CPUs.
  EXPECT_EQ(*num(f, "recommended_num_workers"), 6);
  EXPECT_NE(f.fix.find("num_workers=6"), std::string::npos) << f.fix;
  EXPECT_NEAR(*num(f, "worker_capacity_batches_per_s"), 20, 0.5);
  EXPECT_NEAR(*num(f, "consumer_demand_batches_per_s"), 50, 1e-6);
  EXPECT_NEAR(*num(f, "getitem_p50_ms"), 99.0 / 32, 0.01);
  EXPECT_GT(*num(f, "getitem_p99_ms"), *num(f, "getitem_p50_ms"));
  EXPECT_NEAR(*num(f, "collate_p50_ms"), 1, 1e-6);
  EXPECT_NEAR(*num(f, "worker_on_cpu_fraction"), 0.95, 0.01);
  EXPECT_NEAR(*num(f, "data_stall_fraction"), 30.0 / 50, 1e-6);
  EXPECT_NEAR(f.score, 0.6 * 0.99, 0.01);
  EXPECT_EQ(Session::verdict(r->recent), "slow_getitem");
}

TEST(AnalyzeSlowGetitem, TooFewIdleCoresCapTheCountAndAskForCheaperWork) {
  Loader l = cpu_bound(1);
  auto r = run(l, procs(l, 30.0, 95.0, 1.0, 3.0), 4);
  ASSERT_EQ(Session::verdict(r->whole), "slow_getitem");
  const report::Finding& f = r->whole[0];
  // (4 usable - 0.3 main) / 0.96 per worker = 3.85: 4 workers, short of the 6 needed.
  EXPECT_EQ(*num(f, "recommended_num_workers"), 4);
  EXPECT_NE(f.fix.find("num_workers=4"), std::string::npos) << f.fix;
  EXPECT_NE(f.fix.find("cheaper"), std::string::npos) << f.fix;
}

TEST(AnalyzeSlowGetitem, NoIdleCoresNamesTheHotFunctionOffline) {
  Loader l = cpu_bound(1);
  std::vector<HotFunction> hot = {{"Photos.__getitem__", "ds.py:40", 5000, 50.0, 100},
                                  {"Compose.__call__", "transforms.py:95", 4500, 1.0, 100},
                                  {"resize", "ds.py:12", 4000, 3900.0, 100},
                                  {"decode", "ds.py:10", 300, 290.0, 100}};
  // The main process uses a whole core: (2 - 0.99) / 0.96 leaves room for 1 worker.
  auto r = run(l, procs(l, 99.0, 95.0, 1.0, 3.0), 2, {}, hot);
  ASSERT_EQ(Session::verdict(r->whole), "slow_getitem");
  const report::Finding& f = r->whole[0];
  EXPECT_FALSE(num(f, "recommended_num_workers"));
  EXPECT_NE(f.fix.find("resize (ds.py:12)"), std::string::npos) << f.fix;
  EXPECT_NE(f.fix.find("offline"), std::string::npos) << f.fix;
  EXPECT_NE(text(f, "hot_functions")->find("resize (ds.py:12) 40 ms/call"), std::string::npos)
      << *text(f, "hot_functions");
}

TEST(AnalyzeSlowGetitem, NoIdleCoresWithoutProfilesStillSaysWhatToTry) {
  Loader l = cpu_bound(1);
  auto r = run(l, procs(l, 99.0, 95.0, 1.0, 3.0), 2);
  const report::Finding& f = r->whole.at(0);
  EXPECT_EQ(f.id, "slow_getitem");
  EXPECT_NE(f.fix.find("main process uses 0.99 of the 2 usable CPUs, which leaves 1 for workers"),
            std::string::npos)
      << f.fix;
  EXPECT_NE(f.fix.find("1 worker already uses what is left"), std::string::npos) << f.fix;
  EXPECT_NE(f.fix.find("Pillow-SIMD"), std::string::npos);
  EXPECT_NE(f.fix.find("draft"), std::string::npos);
}

// The demo's case: 1 worker on 2 CPUs, the main process mostly waiting. A core is not kept
// for it: what it measurably uses is.
TEST(AnalyzeSlowGetitem, AMostlyWaitingMainProcessLeavesACoreForASecondWorker) {
  Loader l = cpu_bound(1);
  auto r = run(l, procs(l, 30.0, 95.0, 1.0, 3.0), 2);
  const report::Finding& f = r->whole.at(0);
  ASSERT_EQ(f.id, "slow_getitem");
  // (2 - 0.3) / 0.96 = 1.77 workers fit: the second gets 0.77 of what it wants.
  EXPECT_EQ(*num(f, "recommended_num_workers"), 2);
  EXPECT_NEAR(*num(f, "main_process_cpu_cores"), 0.3, 0.01);
  EXPECT_NEAR(*num(f, "cpu_left_for_workers"), 1.7, 0.01);
  EXPECT_FALSE(num(f, "other_processes_cpu_cores"));  // affinity 2 of 64 online: unknowable
  EXPECT_NE(f.fix.find("num_workers=2 (now 1), all the measured CPU allows (the main process "
                       "uses 0.3 of the 2 usable CPUs, which leaves 1.7 for workers"),
            std::string::npos)
      << f.fix;
}

TEST(AnalyzeSlowGetitem, FlipsWhereTheLastWorkerWouldGetAQuarterOfTheCpuItWants) {
  Loader l = cpu_bound(1);
  // (2 - 0.75) / 0.96 = 1.30: the second worker gets 0.30 of a worker's CPU.
  auto more = run(l, procs(l, 75.0, 95.0, 1.0, 3.0), 2);
  EXPECT_EQ(*num(more->whole.at(0), "recommended_num_workers"), 2);
  // (2 - 0.85) / 0.96 = 1.20: it would get 0.20.
  auto none = run(l, procs(l, 85.0, 95.0, 1.0, 3.0), 2);
  EXPECT_FALSE(num(none->whole.at(0), "recommended_num_workers"));
}

TEST(AnalyzeSlowGetitem, AnUnmeasuredMainProcessIsAssumedToKeepACore) {
  Loader l = cpu_bound(1);
  auto r = run(l, procs(l, std::nullopt, 95.0, 1.0, 3.0), 2);
  const report::Finding& f = r->whole.at(0);
  EXPECT_FALSE(num(f, "recommended_num_workers"));
  EXPECT_NE(f.fix.find("assumed to use 1 (not measured)"), std::string::npos) << f.fix;
}

/// 20 s of `l` on a machine whose every CPU the job may use (no narrower affinity), busy
/// `busy_pct` of the time in all.
std::unique_ptr<Run> on_whole_machine(const Loader& l, double main_cpu, double busy_pct) {
  auto r = std::make_unique<Run>();
  system::Facts f = facts(2);
  f.cpu.online = 2;
  r->s.set_facts(f);
  feed(r->s, l, kT0, 20);
  sample::MachineSample m;
  m.cpu_busy_pct = busy_pct;
  feed_passes(r->s, kT0, 20, procs(l, main_cpu, 95.0, 1.0, 3.0), m);
  r->whole = r->s.findings(0, Window::kWholeRun);
  return r;
}

TEST(AnalyzeSlowGetitem, OtherProcessesCpuIsNotTheWorkers) {
  Loader l = cpu_bound(1);
  // The job uses 0.3 + 0.95; the machine is busy 1.4 of 2: others 0.15, 1.55 left.
  auto quiet = on_whole_machine(l, 30.0, 70.0);
  const report::Finding& q = quiet->whole.at(0);
  EXPECT_NEAR(*num(q, "other_processes_cpu_cores"), 0.15, 0.01);
  EXPECT_EQ(*num(q, "recommended_num_workers"), 2);
  // Busy 2 of 2: others use 0.75, which leaves 0.95, one worker's worth.
  auto loaded = on_whole_machine(l, 30.0, 100.0);
  const report::Finding& b = loaded->whole.at(0);
  EXPECT_NEAR(*num(b, "other_processes_cpu_cores"), 0.75, 0.01);
  EXPECT_FALSE(num(b, "recommended_num_workers"));
  EXPECT_NE(b.fix.find("other processes 0.75"), std::string::npos) << b.fix;
}

TEST(AnalyzeSlowGetitem, TheMainProcessStartUpIsNotWhatItTakesFromWorkers) {
  Loader l = cpu_bound(1);
  sim::Run r;
  r.s.set_facts(facts(2));
  // 10 s of building the dataset at a whole core before the first batch, then 30 %.
  feed_passes(r.s, kT0 - 10 * kS, 10, procs(l, 100.0, std::nullopt));
  feed(r.s, l, kT0, 20);
  feed_passes(r.s, kT0, 20, procs(l, 30.0, 95.0, 1.0, 3.0));
  const auto whole = r.s.findings(0, Window::kWholeRun);
  EXPECT_NEAR(*num(whole.at(0), "main_process_cpu_cores"), 0.3, 0.02);
  EXPECT_EQ(*num(whole.at(0), "recommended_num_workers"), 2);
}

TEST(AnalyzeSlowGetitem, ContendedCpusGiveNoWorkerCount) {
  Loader l = cpu_bound();
  // Other processes load the CPUs: idle by count, not in fact.
  auto r = run(l, procs(l, 30.0, 60.0, 15.0, 3.0), 8);
  const report::Finding* f = find(r->whole, "slow_getitem");
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(num(*f, "recommended_num_workers"));
}

TEST(AnalyzeSlowGetitem, FlipsAtCapacityMargin) {
  Loader l = cpu_bound();  // 20 batches/s of capacity
  l.jitter = 0;
  l.wait_ms = 10;    // a stall, whatever its cause
  l.step_ms = 54.5;  // demand 18.35/s: capacity 1.09 x demand
  EXPECT_EQ(Session::verdict(run(l, procs(l, 30.0, 95.0, 1.0), 8)->whole), "slow_getitem");
  l.step_ms = 55.5;  // capacity 1.11 x demand: the workers could keep up
  EXPECT_TRUE(run(l, procs(l, 30.0, 95.0, 1.0), 8)->whole.empty());
}

TEST(AnalyzeSlowGetitem, SerialLoadingAsksForWorkers) {
  Loader l = cpu_bound(0);
  l.fetch_ms = 30;  // num_workers=0: every fetch is waited for, 60 % of the loop
  auto r = run(l, procs(l, 99.0, std::nullopt), 8);
  ASSERT_EQ(Session::verdict(r->whole), "slow_getitem");
  const report::Finding& f = r->whole[0];
  EXPECT_EQ(*num(f, "recommended_num_workers"), 2);  // ceil(50 x 0.03 x 1.1)
  EXPECT_NE(f.fix.find("num_workers=2 (now 0)"), std::string::npos) << f.fix;
  EXPECT_EQ(find(r->whole, "main_process_bound"), nullptr);
}

TEST(AnalyzeCapacity, HotStepSkipsWrappersAndSmallSteps) {
  std::vector<HotFunction> hot = {{"__getitem__", "", 10, 0.1, 1},
                                  {"Compose.__call__", "", 9, 0.1, 1},
                                  {"decode_jpeg", "", 8, 8.0, 1}};
  ASSERT_NE(hottest_step(hot), nullptr);
  EXPECT_EQ(hottest_step(hot)->name, "decode_jpeg");
  // The work is in __getitem__'s own loop: every other step is under kHotStepShare.
  std::vector<HotFunction> own = {{"Rows.__getitem__", "ds.py:9", 100, 95.0, 1},
                                  {"helper", "ds.py:20", 19, 19.0, 1}};
  EXPECT_EQ(hottest_step(own)->name, "Rows.__getitem__");
  EXPECT_EQ(hottest_step({}), nullptr);
  // Hugging Face datasets around a set_transform function: its own frames are hotter than
  // the user's function, which is the one to name; an installed package's step is named
  // only when no step of the job's own code is hot.
  const std::string hf = "/venv/lib/python3.11/site-packages/datasets/arrow_dataset.py";
  std::vector<HotFunction> wrapped = {{"Dataset.__getitems__", hf + ":3163", 590, 0.1, 4},
                                      {"Dataset._getitem", hf + ":3128", 590, 0.2, 4},
                                      {"format_table", hf + ":600", 580, 0.3, 4},
                                      {"transform", "/home/me/train.py:8", 575, 2.0, 4},
                                      {"avg_pool2d", "", 400, 400, 4}};
  EXPECT_EQ(hottest_step(wrapped)->name, "transform");
  wrapped[3].location = hf + ":700";
  EXPECT_EQ(hottest_step(wrapped)->name, "Dataset._getitem");
  EXPECT_NE(hot_step_advice("decode_jpeg").find("draft"), std::string::npos);
  EXPECT_NE(hot_step_advice("resize").find("training size"), std::string::npos);
  EXPECT_EQ(workers_for(50, 0.1), 6);
  EXPECT_EQ(workers_for(0.001, 0.1), 1);
}

// Attached without the hooks: no batch timed, the stacks prove the shortfall.

TEST(AnalyzeSlowGetitem, StackProofFlipsAtTheIdleShare) {
  namespace a = attach_sim;
  auto below = a::job_of(a::stacked(0.7, kStackIdleShare - 0.01, 1 - kStackIdleShare + 0.01));
  const auto e = slow_getitem::detect(below);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_FALSE(e[0].fetch.figures.shortfall.capacity);  // capacity and demand: unknown
  EXPECT_EQ(e[0].fetch.severity(), report::Severity::kCritical);
  auto at = a::job_of(a::stacked(0.7, kStackIdleShare, 1 - kStackIdleShare));
  EXPECT_TRUE(slow_getitem::detect(at).empty());  // idle that often: time to spare
}

TEST(AnalyzeSlowGetitem, StackProofNeedsEnoughSamples) {
  namespace a = attach_sim;
  EXPECT_TRUE(slow_getitem::detect(a::job_of(a::stacked(0.7, 0, 1, 0, 0, 95, kMinStackSamples - 1)))
                  .empty());
  EXPECT_EQ(
      slow_getitem::detect(a::job_of(a::stacked(0.7, 0, 1, 0, 0, 95, kMinStackSamples))).size(),
      1u);
}

TEST(AnalyzeSlowGetitem, StackProofSizesWorkersFromTheStall) {
  namespace a = attach_sim;
  // The consumer runs half the loop: it asks for 2x what 1 worker supplies, 3 with headroom.
  const auto fs = run_rules(a::job_of(a::stacked(0.5, 0, 1), 8));
  const report::Finding* f = find(fs, "slow_getitem");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*num(*f, "recommended_num_workers"), 3);
  EXPECT_NE(f->fix.find("asks for 2x what 1 worker supplies now"), std::string::npos) << f->fix;
  EXPECT_EQ(*text(*f, "consumer_demand_batches_per_s"), "unknown");
  EXPECT_EQ(workers_for_stall(2, 0.75), 9);   // 2 / 0.25 x 1.1
  EXPECT_EQ(workers_for_stall(0, 1.0), 110);  // bounded: the consumer's share is 1% at least
}

}  // namespace
}  // namespace dldoctor::analyze
