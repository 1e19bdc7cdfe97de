// ram_pressure at the edges of its thresholds: MemAvailable, the job's own cgroup headroom,
// swap traffic and memory pressure; critical only when it thrashes while the loop stalls.
#include "dldoctor_core/analyze/rules/ram_pressure.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

TEST(AnalyzeMemory, LowAvailableFlipsAtTenPercent) {
  Loader l;
  EXPECT_TRUE(with_memory(l, 1000 * kMiB, 100 * kMiB).empty());
  auto fs = with_memory(l, 1000 * kMiB, 99 * kMiB);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"ram_pressure"});
  EXPECT_EQ(fs[0].severity, report::Severity::kWarning);
  EXPECT_EQ(*num(fs[0], "mem_available_min_bytes"), double(99 * kMiB));
}

TEST(AnalyzeMemory, SwapAndPressureThresholds) {
  Loader l;
  // Plenty available, swapping below 256 pages/s and pressure below 10%: nothing.
  EXPECT_TRUE(with_memory(l, 1000 * kMiB, 500 * kMiB, 255.0, 9.9).empty());
  EXPECT_EQ(ids(with_memory(l, 1000 * kMiB, 500 * kMiB, 256.0)),
            std::vector<std::string>{"ram_pressure"});
  EXPECT_EQ(ids(with_memory(l, 1000 * kMiB, 500 * kMiB, std::nullopt, 10.0)),
            std::vector<std::string>{"ram_pressure"});
}

TEST(AnalyzeMemory, ThrashingWhileTheLoopStallsIsCritical) {
  Loader l;
  l.fetch_ms = 100;  // 2 workers x 100 ms: 20 batches/s for a loop that wants 50
  auto fs = with_memory(l, 1000 * kMiB, 50 * kMiB, 1000.0, 30.0);
  const report::Finding* f = find(fs, "ram_pressure");
  ASSERT_NE(f, nullptr) << ::testing::PrintToString(ids(fs));
  EXPECT_EQ(f->severity, report::Severity::kCritical);
  // Low memory without the loop stalling stays a warning.
  Loader fast;
  EXPECT_EQ(find(with_memory(fast, 1000 * kMiB, 50 * kMiB, 1000.0, 30.0), "ram_pressure")->severity,
            report::Severity::kWarning);
}

TEST(AnalyzeMemory, CgroupHeadroomFromTheJobsOwnCgroup) {
  Loader l;
  auto s = session(l, memory_facts(64 * kGiB));
  CgroupMemoryNote c;
  c.limit_bytes = 1000 * kMiB;
  c.usage_bytes = 901 * kMiB;  // headroom 9.9%
  c.t_ns = kT0 + kS;
  s->note(c);
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"ram_pressure"});
  EXPECT_NEAR(*num(fs[0], "cgroup_headroom_fraction"), 0.099, 1e-9);
  auto s2 = session(l, memory_facts(64 * kGiB));
  c.usage_bytes = 900 * kMiB;
  s2->note(c);
  EXPECT_TRUE(whole(*s2).empty());
}

}  // namespace
}  // namespace dldoctor::analyze
