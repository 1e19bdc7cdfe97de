// io_bound at the edges of its thresholds: off-CPU fetches, storage reads against the page
// cache, data that fits in RAM, queueing for a CPU that is not waiting for I/O.
#include "dldoctor_core/analyze/rules/io_bound.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"
#include "../attach_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

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

TEST(AnalyzeIoBound, StackProofOfWorkersWaitingOnReads) {
  namespace a = attach_sim;
  // On a CPU 5% of the time while fetching in every sample: they wait.
  const auto fs = run_rules(a::job_of(a::stacked(0.9, 0, 0.1, 0, 0.9, 5)));
  const report::Finding* f = find(fs, "io_bound");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, report::Severity::kCritical);
  EXPECT_NEAR(*num(*f, "stack_reading_share"), 0.9, 1e-9);
  EXPECT_NE(f->title.find("fetching in 100% of the stack samples"), std::string::npos) << f->title;
  // Idle a third of the time: the workers have capacity to spare, the stall is elsewhere.
  EXPECT_EQ(find(run_rules(a::job_of(a::stacked(0.9, 0.3, 0.1, 0, 0.6, 5))), "io_bound"), nullptr);
}

}  // namespace
}  // namespace dldoctor::analyze
