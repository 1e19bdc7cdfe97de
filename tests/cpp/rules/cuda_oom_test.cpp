// cuda_oom: an out-of-memory raised, with the largest batch that fits; the batch-size estimator
// behind its fix (fixed figures in the shape of a real training step, no GPU here) and the
// reader of torch's message.
#include "dldoctor_core/analyze/rules/cuda_oom.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

// Peaks of the shape a ResNet-50-like fp32 training step shows (fixed ~1.5 GiB of weights,
// gradients, optimizer state and workspaces; ~90 MiB of activations per 224x224 sample).
// These are fixed figures in that shape, not a measurement taken for this test (no GPU here).
TEST(CudaEstimator, LineThroughTwoOrMoreBatchSizes) {
  const int64_t fixed = 1536 * kMiB, per = 90 * kMiB, total = 40 * kGiB;
  std::vector<PeakSample> peaks = {{32, fixed + 32 * per, std::nullopt},
                                   {64, fixed + 64 * per, std::nullopt},
                                   {128, fixed + 128 * per, std::nullopt}};
  auto fit = largest_fitting_batch(peaks, total);
  ASSERT_TRUE(fit);
  EXPECT_NEAR(fit->per_sample_bytes, double(per), 1.0);
  EXPECT_NEAR(fit->fixed_bytes, double(fixed), 64.0);
  // budget 0.9 x 40 GiB = 36 GiB: (36 GiB - 1.5 GiB) / 90 MiB = 392.5 -> 392.
  EXPECT_EQ(fit->largest_batch_size, 392);
  EXPECT_EQ(fit->batch_sizes, 3);
}

TEST(CudaEstimator, OneBatchSizeUsesTheMemoryHeldBetweenSteps) {
  const int64_t total = 16 * kGiB;
  // bs 64: peak 10 GiB, 2 GiB held between steps -> 128 MiB per sample.
  auto fit = largest_fitting_batch({{64, 10 * kGiB, 2 * kGiB}}, total);
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->per_sample_bytes, double(128 * kMiB));
  // (14.4 GiB - 2 GiB) / 128 MiB = 99.2 -> 99.
  EXPECT_EQ(fit->largest_batch_size, 99);
  // Without the baseline all of the peak counts per sample: a smaller, safer answer.
  auto safe = largest_fitting_batch({{64, 10 * kGiB, std::nullopt}}, total);
  ASSERT_TRUE(safe);
  EXPECT_EQ(safe->largest_batch_size, 92);  // 14.4 GiB / 160 MiB = 92.16
  EXPECT_LT(safe->largest_batch_size, fit->largest_batch_size);
}

TEST(CudaEstimator, AFailedBatchSizeCapsTheAnswerBelowIt) {
  const int64_t total = 16 * kGiB;
  // Measured fine at 32 (6 GiB) with 2 GiB fixed; 128 failed asking past the device.
  auto fit = largest_fitting_batch({{32, 6 * kGiB, 2 * kGiB}, {128, 18 * kGiB, std::nullopt, true}},
                                   total);
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->batch_sizes, 2);
  EXPECT_LT(fit->largest_batch_size, 128);
  EXPECT_GE(fit->largest_batch_size, 32);
  // A line through a failure that asked for less than the budget is still capped.
  auto capped = largest_fitting_batch(
      {{64, 4 * kGiB, 1 * kGiB, false}, {96, 5 * kGiB, std::nullopt, true}}, total);
  ASSERT_TRUE(capped);
  EXPECT_EQ(capped->largest_batch_size, 95);
  EXPECT_TRUE(capped->capped_by_failure);
}

TEST(CudaEstimator, NothingUsableGivesNothing) {
  EXPECT_FALSE(largest_fitting_batch({}, 16 * kGiB));
  EXPECT_FALSE(largest_fitting_batch({{64, 8 * kGiB, std::nullopt}}, 0));
  EXPECT_FALSE(largest_fitting_batch({{0, 8 * kGiB, std::nullopt}}, 16 * kGiB));
  // The fixed part alone is past the budget: batch size 0, not a negative one.
  auto none = largest_fitting_batch({{8, 15 * kGiB, 15 * kGiB - 8 * kMiB}}, 16 * kGiB);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->largest_batch_size, 0);
}

TEST(CudaOomText, ParsesCurrentAndOlderWording) {
  auto t = parse_cuda_oom(
      "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
      "of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB "
      "memory in use. Of the allocated memory 76.50 GiB is allocated by PyTorch, and 1.07 GiB "
      "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
      "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.");
  EXPECT_EQ(*t.device, 0);
  EXPECT_EQ(*t.tried_bytes, 2 * kGiB);
  EXPECT_EQ(*t.total_bytes, int64_t(79.15 * double(kGiB)));
  EXPECT_EQ(*t.free_bytes, int64_t(1.06 * double(kGiB)));
  EXPECT_EQ(*t.allocated_bytes, int64_t(76.50 * double(kGiB)));
  EXPECT_EQ(*t.reserved_unallocated_bytes, int64_t(1.07 * double(kGiB)));
  auto old = parse_cuda_oom(
      "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 7.79 GiB total capacity; 6.21 "
      "GiB already allocated; 15.50 MiB free; 6.43 GiB reserved in total by PyTorch)");
  EXPECT_EQ(*old.device, 1);
  EXPECT_EQ(*old.tried_bytes, 20 * kMiB);
  EXPECT_EQ(*old.total_bytes, int64_t(7.79 * double(kGiB)));
  EXPECT_EQ(*old.allocated_bytes, int64_t(6.21 * double(kGiB)));
  EXPECT_EQ(*old.free_bytes, int64_t(15.5 * double(kMiB)));
  auto none = parse_cuda_oom("something else entirely");
  EXPECT_FALSE(none.tried_bytes || none.total_bytes || none.device);
}

TEST(AnalyzeCuda, OomRaisedIsCriticalWithTheLargestBatchThatFits) {
  Loader l;  // batch_size 32
  auto s = session(l, facts(8));
  s->note(cuda_note(12 * kGiB, 4 * kGiB, 16 * kGiB));  // bs 32 (from the loader's config)
  s->note(
      error("CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity "
            "of 16.00 GiB of which 512.00 MiB is free. Of the allocated memory 14.50 GiB "
            "is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but "
            "unallocated.",
            ErrorSource::kUncaught, "torch.OutOfMemoryError"));
  auto fs = whole(*s);
  ASSERT_FALSE(fs.empty());
  EXPECT_EQ(fs[0].id, "cuda_oom");
  EXPECT_EQ(fs[0].severity, report::Severity::kCritical);
  EXPECT_EQ(*num(fs[0], "batch_size"), 32.0);
  EXPECT_EQ(*num(fs[0], "peak_allocated_bytes"), double(12 * kGiB));
  EXPECT_EQ(*num(fs[0], "tried_to_allocate_bytes"), double(3 * kGiB));
  // Steps at 32 peaked at 12 GiB, but the failed one needed at least 14.5 + 3 = 17.5 GiB
  // (inputs vary): the estimate takes the larger, 4 GiB fixed and 13.5 GiB / 32 per sample,
  // (14.4 - 4) GiB / 0.42 GiB = 24.7 -> 24.
  EXPECT_EQ(*num(fs[0], "largest_batch_size_that_fits"), 24.0);
  EXPECT_NE(fs[0].fix.find("batch_size=24"), std::string::npos) << fs[0].fix;
  EXPECT_NE(fs[0].fix.find("2 steps of gradient accumulation"), std::string::npos);
  EXPECT_EQ(find(fs, "cuda_oom_risk"), nullptr);
}

}  // namespace
}  // namespace dldoctor::analyze
