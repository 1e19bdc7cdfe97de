// pinned_memory_pressure: memory short while a loader pins its batches, with the pinned bytes
// measured (the batches finished and not yet taken at each hand-out) and the share of memory
// they hold at the edge where the finding becomes ram_pressure's; pin_memory=True without an
// accelerator (info).
#include "dldoctor_core/analyze/rules/pinned_memory_pressure.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

/// 20 s of a pin_memory loader whose workers run `ahead` batches ahead of the consumer (a
/// GPU-bound loop: the queues stay full), batches of `batch_bytes` (-1: unknown).
std::unique_ptr<Session> ahead_of_the_loop(int ahead, int64_t batch_bytes, const system::Facts& f) {
  auto s = std::make_unique<Session>();
  s->set_facts(f);
  Loader l;
  l.flags |= trace::kPinMemory;
  s->ingest(event(trace::EventKind::kIterStart, l.main_pid, kT0, 0, l.num_workers,
                  l.prefetch_factor, uint32_t(l.batch_size), 0, l.main_pid, 1, 0, l.flags));
  auto worker_batch = [&](int i, int64_t t) {
    s->ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(i % 2), t - 30 * kMs, 0, i % 2, i,
                    32, 30 * kMs, kMs, 28 * kMs, batch_bytes));
  };
  for (int i = 0; i < ahead; ++i) worker_batch(i, kT0 + 50 * kMs);
  for (int i = 0; i < 400; ++i) {  // 50 ms steps, no wait: 20 s
    const int64_t t = kT0 + 100 * kMs + i * 50 * kMs;
    worker_batch(i + ahead, t);
    s->ingest(event(trace::EventKind::kMainBatch, l.main_pid, t, 0, i % 2, i, 0, 0,
                    i == 0 ? -1 : 50 * kMs, 2 * kMs));
  }
  return s;
}

/// The same, on a machine of 1000 MiB with 50 MiB available (memory short).
std::vector<report::Finding> short_machine(int ahead, int64_t batch_bytes) {
  auto s = ahead_of_the_loop(ahead, batch_bytes, memory_facts(1000 * kMiB));
  sample::MachineSample m;
  m.mem_available_bytes = 50 * kMiB;
  feed_passes(*s, kT0, 20, procs(Loader{}, 10.0, 10.0), m);
  return whole(*s);
}

TEST(AnalyzeMemory, PinnedBatchesMeasuredInFlightMakeItPinnedMemoryPressure) {
  auto fs = short_machine(4, 16 * kMiB);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"pinned_memory_pressure"});
  const report::Finding& f = fs[0];
  // 4 finished and waiting at each hand-out, and the one in use: 5 x 16 MiB.
  EXPECT_EQ(*num(f, "pinned_batches_in_flight"), 5.0);
  EXPECT_EQ(*num(f, "pinned_bytes_in_flight"), double(80 * kMiB));
  EXPECT_EQ(*num(f, "pinned_bytes_estimate"), double(80 * kMiB));  // (2 x 2 + 1) x 16 MiB
  EXPECT_NEAR(*num(f, "pinned_share_of_memory"), 0.08, 1e-9);
  EXPECT_EQ(*num(f, "mem_available_min_bytes"), double(50 * kMiB));
  EXPECT_NE(f.fix.find("pin_memory=False"), std::string::npos);
  EXPECT_NE(f.why.find("up to 80 MiB (5 batches finished and not yet taken"), std::string::npos)
      << f.why;
  // A starved loop (nothing waits in the queues) pins only the batch in use: the measured
  // figure is below the configuration's bound.
  auto starved = short_machine(0, 64 * kMiB);
  ASSERT_EQ(ids(starved), std::vector<std::string>{"pinned_memory_pressure"});
  EXPECT_EQ(*num(starved[0], "pinned_bytes_in_flight"), double(64 * kMiB));
  EXPECT_EQ(*num(starved[0], "pinned_bytes_estimate"), double(320 * kMiB));
}

TEST(AnalyzeMemory, PinnedBatchesUnderAFewPercentOfMemoryAreRamPressure) {
  // 5 batches in flight: at kPinnedMinShare of 1000 MiB exactly, pinned memory counts ...
  const int64_t at_edge = int64_t(0.05 * double(1000 * kMiB)) / 5;
  EXPECT_EQ(ids(short_machine(4, at_edge)), std::vector<std::string>{"pinned_memory_pressure"});
  // ... a byte less per batch and giving it all back would not end the shortage.
  auto fs = short_machine(4, at_edge - 1);
  EXPECT_EQ(ids(fs), std::vector<std::string>{"ram_pressure"});
}

TEST(AnalyzeMemory, PinnedBytesUnknownStillPointAtPinMemory) {
  auto fs = short_machine(4, -1);  // no batch bytes from the hooks: no share to judge by
  ASSERT_EQ(ids(fs), std::vector<std::string>{"pinned_memory_pressure"});
  EXPECT_FALSE(num(fs[0], "pinned_bytes_in_flight"));
  EXPECT_FALSE(num(fs[0], "pinned_share_of_memory"));
}

TEST(AnalyzeMemory, TheCgroupsLimitIsTheMemoryThePinnedShareIsOf) {
  // 80 MiB pinned: 8% of a 1000 MiB machine, 1% of an 8000 MiB one, 8% of its 1000 MiB cgroup.
  system::Facts f = memory_facts(8000 * kMiB);
  f.memory.cgroup_limit_bytes = 1000 * kMiB;
  f.memory.cgroup_usage_bytes = 960 * kMiB;  // 4% headroom: short
  auto s = ahead_of_the_loop(4, 16 * kMiB, f);
  feed_passes(*s, kT0, 20, procs(Loader{}, 10.0, 10.0));
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"pinned_memory_pressure"});
  EXPECT_NEAR(*num(fs[0], "pinned_share_of_memory"), 0.08, 1e-9);
  EXPECT_EQ(*num(fs[0], "cgroup_memory_limit_bytes"), double(1000 * kMiB));
}

TEST(AnalyzeMemory, PinnedLoaderWithMemoryToSpareIsQuiet) {
  auto s = ahead_of_the_loop(4, 16 * kMiB, memory_facts(1000 * kMiB));
  sample::MachineSample m;
  m.mem_available_bytes = 500 * kMiB;
  feed_passes(*s, kT0, 20, procs(Loader{}, 10.0, 10.0), m);
  EXPECT_TRUE(whole(*s).empty());
}

TEST(AnalyzeMemory, PinMemoryWithoutAcceleratorIsInfoOnly) {
  Loader l;
  auto s = session(l, facts(8));
  RuntimeNote r = runtime(1024);
  r.pin_memory_requested = true;
  r.accelerator = false;
  s->note(r);
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"pinned_memory_pressure"});
  EXPECT_EQ(fs[0].severity, report::Severity::kInfo);
  EXPECT_EQ(Session::verdict(fs), "healthy");
  r.accelerator = true;
  auto s2 = session(l, facts(8));
  s2->note(r);
  EXPECT_TRUE(whole(*s2).empty());
}

}  // namespace
}  // namespace dldoctor::analyze
