// cuda_oom_risk at the edge of its threshold: the peak within the kept-free share of the
// device.
#include "dldoctor_core/analyze/rules/cuda_oom_risk.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

TEST(AnalyzeCuda, RiskFlipsAtNinetyPercentOfTheDevice) {
  Loader l;
  auto with_peak = [&](int64_t peak) {
    auto s = session(l, facts(8));
    s->note(cuda_note(peak, 2 * kGiB, 10 * kGiB));
    return whole(*s);
  };
  EXPECT_TRUE(with_peak(9 * kGiB - 1).empty());
  auto fs = with_peak(9 * kGiB);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"cuda_oom_risk"});
  EXPECT_EQ(fs[0].severity, report::Severity::kWarning);
  EXPECT_EQ(*num(fs[0], "headroom_bytes"), double(1 * kGiB));
  EXPECT_EQ(*num(fs[0], "largest_batch_size_that_fits"), 32.0);  // 7 GiB / (7 GiB / 32)
}

TEST(AnalyzeCuda, WithoutCudaNothing) {
  Loader l;
  EXPECT_TRUE(whole(*session(l, facts(8))).empty());
}

}  // namespace
}  // namespace dldoctor::analyze
