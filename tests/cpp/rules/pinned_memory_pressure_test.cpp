// pinned_memory_pressure: memory short while a loader pins its batches (with the pinned bytes),
// and pin_memory=True without an accelerator (info).
#include "dldoctor_core/analyze/rules/pinned_memory_pressure.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

TEST(AnalyzeMemory, PinnedLoaderMakesItPinnedMemoryPressureWithThePinnedBytes) {
  Loader l;
  l.flags |= trace::kPinMemory;
  auto fs = with_memory(l, 1000 * kMiB, 50 * kMiB);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"pinned_memory_pressure"});
  EXPECT_EQ(*num(fs[0], "pinned_bytes_estimate"), double(5 * kMiB));  // (2 x 2 + 1) x 1 MiB
  EXPECT_NE(fs[0].fix.find("pin_memory=False"), std::string::npos);
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
