// Each throughput rule at the edges of its named thresholds, on synthetic streams that
// model a real pipeline (analyze_sim.hpp): just above and just below flips the finding.
#include <gtest/gtest.h>

#include "analyze_sim.hpp"
#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

struct Run {
  Session s;
  std::vector<report::Finding> whole, recent;
};

/// 20 s of `l` with passes of `ps`, analysed over the whole run and the last 10 s.
std::unique_ptr<Run> run(const Loader& l, const std::vector<Proc>& ps,
                         std::optional<double> usable, const sample::MachineSample& m = {},
                         std::vector<HotFunction> hot = {}) {
  auto r = std::make_unique<Run>();
  r->s.set_facts(facts(usable));
  if (!hot.empty()) r->s.add_hot_functions(l.id, hot);
  const int64_t end = feed(r->s, l, kT0, 20);
  if (!ps.empty()) feed_passes(r->s, kT0, 20, ps, m);
  r->whole = r->s.findings(0, Window::kWholeRun);
  r->recent = r->s.findings(end, Window::kRecent);
  return r;
}

// --- healthy and main_process_bound -------------------------------------------------------

TEST(AnalyzeHealthy, FastLoaderGivesNoFindings) {
  Loader l;  // 2 workers x 10 ms per batch supply 200 batches/s; the loop wants 50
  auto r = run(l, procs(l, 40.0, 5.0, 1.0, 2.0), 8);
  EXPECT_TRUE(r->whole.empty()) << ids(r->whole).front();
  EXPECT_TRUE(r->recent.empty());
  EXPECT_EQ(Session::verdict(r->whole), "healthy");
}

TEST(AnalyzeHealthy, SlowSleepingConsumerGivesNoFindings) {
  Loader l;
  l.step_ms = 500;  // e.g. time.sleep or waiting on a GPU
  auto r = run(l, procs(l, 1.0, 1.0, 0.5, 1.0), 8);
  EXPECT_TRUE(r->whole.empty());
  EXPECT_EQ(Session::verdict(r->whole), "healthy");
}

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

// --- the data-stall gate ----------------------------------------------------------------

TEST(AnalyzeStall, FlipsAtFivePercent) {
  Loader l;
  l.num_workers = 1;
  l.fetch_ms = 100;  // 10 batches/s; the wait per batch is fetch - step
  l.jitter = 0;
  l.step_ms = 95.1;  // wait 4.9 ms: 4.9 % of the loop
  auto below = run(l, procs(l, 30.0, 95.0, 1.0, 2.0), 2);
  EXPECT_TRUE(below->whole.empty()) << ids(below->whole).front();
  l.step_ms = 94.9;  // wait 5.1 ms: 5.1 %
  auto above = run(l, procs(l, 30.0, 95.0, 1.0, 2.0), 2);
  ASSERT_FALSE(above->whole.empty());
  EXPECT_EQ(above->whole[0].id, "slow_getitem");
  EXPECT_NEAR(*num(above->whole[0], "data_stall_fraction"), 0.051, 1e-6);
}

TEST(AnalyzeStall, TooFewBatchesAreNotJudged) {
  Session s;
  s.set_facts(facts(8));
  Loader l;
  l.num_workers = 1;
  l.fetch_ms = 1000;
  l.step_ms = 10;
  feed(s, l, kT0, 4.5);  // 5 batches: the first plus 4 with a step
  EXPECT_TRUE(s.findings(0, Window::kWholeRun).empty());
  feed(s, l, kT0 + 5 * kS, 1.5, false);
  EXPECT_EQ(Session::verdict(s.findings(0, Window::kWholeRun)), "slow_getitem");
}

TEST(AnalyzeStall, FlipsAtMinimumLoopTime) {
  Loader l;
  l.num_workers = 1;
  l.fetch_ms = 100;
  l.step_ms = 20;  // wait 80 ms: every stepped batch is 100 ms of loop
  l.jitter = 0;
  for (auto [seconds, verdict] : {std::pair{2.0, "healthy"}, std::pair{2.2, "slow_getitem"}}) {
    Session s;  // 19 stepped batches (1.9 s of loop), then 21 (2.1 s)
    s.set_facts(facts(8));
    feed(s, l, kT0, seconds);
    EXPECT_EQ(Session::verdict(s.findings(0, Window::kRecent)), verdict) << seconds;
  }
}

// --- too_many_workers -------------------------------------------------------------------

Loader oversubscribed(double on_cpu = 0.3) {
  Loader l;
  l.num_workers = 6;  // on 2 usable CPUs
  l.fetch_ms = 300;   // wall time, stretched by queueing for a CPU
  l.on_cpu = on_cpu;
  l.step_ms = 20;
  return l;
}

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
  // floor(2 usable) - 1, never os.cpu_count() (64 online here).
  EXPECT_EQ(*num(f, "recommended_num_workers"), 1);
  EXPECT_NE(f.fix.find("num_workers=1"), std::string::npos) << f.fix;
  EXPECT_NE(f.why.find("main process"), std::string::npos);
  // The heavy __getitem__ is reported too, but as a partial cause.
  const report::Finding* g = find(r->whole, "slow_getitem");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->severity, report::Severity::kWarning);
  EXPECT_EQ(Session::verdict(r->recent), "too_many_workers");
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
  // 3 workers (4 usable - 1) in proportion 4:2.
  EXPECT_NE(fs[0].fix.find("loader 0 num_workers=2"), std::string::npos) << fs[0].fix;
  EXPECT_NE(fs[0].fix.find("loader 1 num_workers=1"), std::string::npos) << fs[0].fix;
}

// --- slow_getitem ---------------------------------------------------------------------------

Loader cpu_bound(int workers = 2) {
  Loader l;
  l.num_workers = workers;
  l.fetch_ms = 100;  // 20 batches/s from 2 workers; the loop wants 50
  l.collate_ms = 1;
  l.on_cpu = 0.95;
  l.step_ms = 20;
  return l;
}

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
  EXPECT_EQ(*num(f, "recommended_num_workers"), 3);  // 1 + (4 - 1 - 1)
  EXPECT_NE(f.fix.find("num_workers=3"), std::string::npos) << f.fix;
  EXPECT_NE(f.fix.find("cheaper"), std::string::npos) << f.fix;
}

TEST(AnalyzeSlowGetitem, NoIdleCoresNamesTheHotFunctionOffline) {
  Loader l = cpu_bound(1);
  std::vector<HotFunction> hot = {{"Photos.__getitem__", "ds.py:40", 5000, 50.0, 100},
                                  {"Compose.__call__", "transforms.py:95", 4500, 1.0, 100},
                                  {"resize", "ds.py:12", 4000, 3900.0, 100},
                                  {"decode", "ds.py:10", 300, 290.0, 100}};
  auto r = run(l, procs(l, 30.0, 95.0, 1.0, 3.0), 2, {}, hot);
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
  auto r = run(l, procs(l, 30.0, 95.0, 1.0, 3.0), 2);
  const report::Finding& f = r->whole.at(0);
  EXPECT_EQ(f.id, "slow_getitem");
  EXPECT_NE(f.fix.find("Pillow-SIMD"), std::string::npos);
  EXPECT_NE(f.fix.find("draft"), std::string::npos);
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
  l.wait_ms = 10;          // a stall, whatever its cause
  l.step_ms = 54.5;        // demand 18.35/s: capacity 1.09 x demand
  EXPECT_EQ(Session::verdict(run(l, procs(l, 30.0, 95.0, 1.0), 8)->whole), "slow_getitem");
  l.step_ms = 55.5;        // capacity 1.11 x demand: the workers could keep up
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

// --- slow_collate ---------------------------------------------------------------------------

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

// --- io_bound -------------------------------------------------------------------------------

Loader waiting(double on_cpu = 0.1) {
  Loader l;
  l.num_workers = 2;
  l.fetch_ms = 200;
  l.on_cpu = on_cpu;
  l.step_ms = 20;
  return l;
}

TEST(AnalyzeIoBound, OffCpuFetchFromStorage) {
  Loader l = waiting();
  sample::MachineSample m;
  m.io_pressure_some = 35;
  auto r = run(l, procs(l, 30.0, 10.0, 0.5, 20.0, 50e6, 52e6), 2, m);
  ASSERT_EQ(ids(r->whole), std::vector<std::string>{"io_bound"});
  const report::Finding& f = r->whole[0];
  EXPECT_EQ(f.severity, report::Severity::kCritical);
  EXPECT_NEAR(*num(f, "storage_read_mb_per_s"), 100, 1e-6);  // 2 workers x 50 MB/s
  EXPECT_NEAR(*num(f, "all_read_mb_per_s"), 104, 1e-6);
  EXPECT_NEAR(*num(f, "io_pressure_some_pct"), 35, 1e-9);
  EXPECT_NEAR(*num(f, "worker_on_cpu_fraction"), 0.1, 0.01);
  // min(ceil(50 x 0.2 x 1.1), floor((2 - 1) / 0.1)) = 10 workers on 2 CPUs.
  EXPECT_EQ(*num(f, "recommended_num_workers"), 10);
  EXPECT_NE(f.fix.find("more workers than the 2 usable CPUs"), std::string::npos) << f.fix;
  EXPECT_NE(f.fix.find("prefetch_factor"), std::string::npos);
  EXPECT_NE(f.why.find("more workers"), std::string::npos) << f.why;
  EXPECT_NE(f.why.find("than cores"), std::string::npos) << f.why;
  EXPECT_NE(f.why.find("opposite of too_many_workers"), std::string::npos) << f.why;
  EXPECT_NE(f.title.find("storage reads"), std::string::npos);
  EXPECT_EQ(Session::verdict(r->recent), "io_bound");
}

TEST(AnalyzeIoBound, WaitingWithoutStorageReadsIsStillIoBound) {
  Loader l = waiting(0.02);  // a slow socket: off-CPU, nothing from the disk
  auto r = run(l, procs(l, 30.0, 2.0, 0.5, 20.0, 0.0, 1e5), 2);
  ASSERT_EQ(Session::verdict(r->whole), "io_bound");
  EXPECT_NE(r->whole[0].title.find("not local storage"), std::string::npos);
  EXPECT_NE(r->whole[0].why.find("more workers"), std::string::npos);
}

TEST(AnalyzeIoBound, PageCacheReadsAreNotStorage) {
  Loader l = waiting();
  auto r = run(l, procs(l, 30.0, 10.0, 0.5, 20.0, 10e6, 100e6), 2);
  ASSERT_EQ(Session::verdict(r->whole), "io_bound");
  EXPECT_EQ(r->whole[0].title.find("storage reads"), std::string::npos);
}

TEST(AnalyzeIoBound, DataThatFitsInRamIsCached) {
  Loader l = waiting();
  Session s;
  s.set_facts(facts(2));
  system::StorageFacts st;
  st.fs_type = "nfs4";
  st.network_fs = true;
  st.bytes = int64_t(2) << 30;
  s.set_data_storage(st);
  feed(s, l, kT0, 20);
  feed_passes(s, kT0, 20, procs(l, 30.0, 10.0, 0.5, 20.0, 50e6, 52e6));
  auto fs = s.findings(0, Window::kWholeRun);
  ASSERT_EQ(Session::verdict(fs), "io_bound");
  EXPECT_NE(fs[0].title.find("network filesystem"), std::string::npos);
  EXPECT_NE(fs[0].fix.find("cache the data in RAM"), std::string::npos) << fs[0].fix;
  EXPECT_EQ(*text(fs[0], "data_fs_type"), "nfs4");
}

TEST(AnalyzeIoBound, FlipsAtCpuBoundFraction) {
  Loader l = waiting(0.49);
  EXPECT_EQ(Session::verdict(run(l, procs(l, 30.0, 49.0, 0.0), 2)->whole), "io_bound");
  l.on_cpu = 0.51;
  EXPECT_EQ(Session::verdict(run(l, procs(l, 30.0, 51.0, 0.0), 2)->whole), "slow_getitem");
}

TEST(AnalyzeIoBound, QueueingForACpuIsNotWaitingForIo) {
  Loader l = waiting(0.3);  // low on-CPU, but runnable the rest of the time
  auto r = run(l, procs(l, 30.0, 30.0, 40.0, 200.0), 4);
  EXPECT_EQ(find(r->whole, "io_bound"), nullptr);
  EXPECT_EQ(Session::verdict(r->whole), "slow_getitem");
}

TEST(AnalyzeIoBound, UnknownRunQueueWithMoreWorkersThanCpusIsAWarning) {
  Loader l = waiting();
  l.num_workers = 4;
  l.fetch_ms = 400;
  auto r = run(l, procs(l, 30.0, 10.0, std::nullopt, std::nullopt), 2);
  const report::Finding* f = find(r->whole, "io_bound");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, report::Severity::kWarning);
}

// --- unknown sampler fields -----------------------------------------------------------------

TEST(AnalyzeUnknowns, NoSamplerAtAllStillDiagnosesFromEvents) {
  Loader l = cpu_bound();
  auto r = run(l, {}, 8);
  ASSERT_EQ(Session::verdict(r->whole), "slow_getitem");
  EXPECT_EQ(*num(r->whole[0], "recommended_num_workers"), 6);
  Loader w = waiting();
  EXPECT_EQ(Session::verdict(run(w, {}, 2)->whole), "io_bound");
}

TEST(AnalyzeUnknowns, UnknownCpuTimeLowersConfidence) {
  Loader l = cpu_bound();
  l.on_cpu.reset();
  auto r = run(l, procs(l, std::nullopt, std::nullopt), 8);
  ASSERT_EQ(r->whole.size(), 1u);
  EXPECT_EQ(r->whole[0].id, "slow_getitem");
  EXPECT_EQ(r->whole[0].severity, report::Severity::kWarning);
  EXPECT_EQ(*text(r->whole[0], "worker_on_cpu_fraction"), "unknown");
  EXPECT_EQ(Session::verdict(r->whole), "healthy");  // no critical: nothing proven
}

TEST(AnalyzeUnknowns, SamplerCpuStandsInForEventCpu) {
  Loader l = waiting();
  l.on_cpu.reset();
  auto r = run(l, procs(l, 30.0, 8.0, 0.5), 2);
  EXPECT_EQ(Session::verdict(r->whole), "io_bound");
}

TEST(AnalyzeUnknowns, EmptyFactsAndEmptyPassesNeverCrash) {
  Loader l = oversubscribed(0.6);
  Session s;
  feed(s, l, kT0, 20);
  sample::Snapshot empty;
  empty.t_ns = kT0 + kS;
  s.ingest(empty);
  feed_passes(s, kT0, 20, procs(l, std::nullopt, std::nullopt));
  auto fs = s.findings(0, Window::kWholeRun);
  EXPECT_EQ(find(fs, "too_many_workers"), nullptr);  // usable CPUs unknown
  const report::Finding* g = find(fs, "slow_getitem");
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(num(*g, "recommended_num_workers"));
  EXPECT_FALSE(s.loaders().empty());
  // Off-CPU workers with nothing to tell waiting from queueing: io_bound, but only a warning.
  Session t;
  Loader w = oversubscribed(0.3);
  feed(t, w, kT0, 20);
  const auto tf = t.findings(0, Window::kWholeRun);
  const report::Finding* io = find(tf, "io_bound");
  ASSERT_NE(io, nullptr);
  EXPECT_EQ(io->severity, report::Severity::kWarning);
}

TEST(AnalyzeUnknowns, NoEventsNoFindings) {
  Session s;
  EXPECT_TRUE(s.findings(0, Window::kWholeRun).empty());
  EXPECT_TRUE(s.findings(0, Window::kRecent).empty());
  EXPECT_TRUE(s.loaders().empty());
  feed_passes(s, kT0, 1, {Proc{1, 0, 50.0}});
  EXPECT_TRUE(s.findings(0, Window::kRecent).empty());
}

// --- helpers --------------------------------------------------------------------------------

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
  EXPECT_NE(hot_step_advice("decode_jpeg").find("draft"), std::string::npos);
  EXPECT_NE(hot_step_advice("resize").find("training size"), std::string::npos);
  EXPECT_EQ(workers_for(50, 0.1), 6);
  EXPECT_EQ(workers_for(0.001, 0.1), 1);
}

}  // namespace
}  // namespace dldoctor::analyze
