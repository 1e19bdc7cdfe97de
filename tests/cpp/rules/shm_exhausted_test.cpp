// shm_exhausted at the edges of its thresholds: the predicted bytes in flight against free
// /dev/shm (with the margin), the failure texts and SIGBUS, the use the sampler saw; the fix
// in `dldoctor check`'s words.
#include "dldoctor_core/analyze/rules/shm_exhausted.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

system::Facts shm_facts(std::optional<int64_t> free, std::optional<int64_t> total) {
  system::Facts f = facts(8);
  f.shm.free_bytes = free;
  f.shm.total_bytes = total;
  return f;
}

// The default sim loader: 2 workers x prefetch_factor 2 + 1 held = 5 batches of 1 MiB in
// flight; with the 2x margin, /dev/shm needs 10 MiB free.
TEST(AnalyzeShm, PredictiveWarningFlipsAtTheMargin) {
  Loader l;
  EXPECT_TRUE(whole(*session(l, shm_facts(10 * kMiB, 10 * kMiB))).empty());
  auto fs = whole(*session(l, shm_facts(10 * kMiB - 1, 10 * kMiB)));
  ASSERT_EQ(ids(fs), std::vector<std::string>{"shm_exhausted"});
  EXPECT_EQ(fs[0].severity, report::Severity::kWarning);
  EXPECT_EQ(*num(fs[0], "in_flight_bytes"), double(5 * kMiB));
  EXPECT_EQ(*num(fs[0], "batches_in_flight"), 5.0);
  EXPECT_EQ(*num(fs[0], "shm_size_needed_bytes"), double(10 * kMiB));
  EXPECT_NE(fs[0].title.find("little margin"), std::string::npos) << fs[0].title;
  EXPECT_EQ(Session::verdict(fs), "healthy");  // a risk, not yet the failure
}

TEST(AnalyzeShm, PredictedOverflowSaysItWillNotFit) {
  Loader l;
  auto fs = whole(*session(l, shm_facts(5 * kMiB - 1, 5 * kMiB)));
  ASSERT_EQ(ids(fs), std::vector<std::string>{"shm_exhausted"});
  EXPECT_EQ(fs[0].severity, report::Severity::kWarning);
  EXPECT_NE(fs[0].title.find("will not fit"), std::string::npos) << fs[0].title;
  // Nothing smaller fits 5 MiB with the margin except one worker with prefetch 1 (2 MiB x 2).
  EXPECT_EQ(*text(fs[0], "fits_today"), "num_workers=1, prefetch_factor=1");
}

TEST(AnalyzeShm, UnknownShmOrNoWorkersSaysNothing) {
  Loader l;
  EXPECT_TRUE(whole(*session(l, shm_facts(std::nullopt, std::nullopt))).empty());
  Loader serial;
  serial.num_workers = 0;  // batches never leave the process
  EXPECT_EQ(find(whole(*session(serial, shm_facts(1 * kMiB, 1 * kMiB))), "shm_exhausted"), nullptr);
}

TEST(AnalyzeShm, NoSpaceFromSharedMemoryIsCriticalWithTheSizeAndASettingThatFits) {
  Loader l;
  l.prefetch_factor = 8;  // 2 x 8 + 1 = 17 MiB in flight
  auto s = session(l, shm_facts(12 * kMiB, 12 * kMiB));
  s->note(
      error("unable to allocate shared memory(shm) for file </torch_8814_3290110147_0>: "
            "No space left on device (28)"));
  auto fs = whole(*s);
  ASSERT_FALSE(fs.empty());
  EXPECT_EQ(fs[0].id, "shm_exhausted");
  EXPECT_EQ(fs[0].severity, report::Severity::kCritical);
  EXPECT_EQ(Session::verdict(fs), "shm_exhausted");
  EXPECT_EQ(*num(fs[0], "in_flight_bytes"), double(17 * kMiB));
  EXPECT_EQ(*num(fs[0], "shm_size_needed_bytes"), double(34 * kMiB));
  // 12 MiB / 2 = 6 MiB of room: 2 x P + 1 <= 6 -> prefetch_factor=2.
  EXPECT_EQ(*text(fs[0], "fits_today"), "prefetch_factor=2");
  EXPECT_NE(fs[0].fix.find("--shm-size=1g"), std::string::npos) << fs[0].fix;
  EXPECT_NE(fs[0].fix.find("remount,size=1G"), std::string::npos);
  EXPECT_NE(fs[0].fix.find("sizeLimit: 1Gi"), std::string::npos);
  EXPECT_NE(fs[0].fix.find("prefetch_factor=2"), std::string::npos);
}

TEST(AnalyzeShm, TextFromTheSendAndTheOlderWordingCountToo) {
  for (const char* msg :
       {"unable to write to file </torch_18692_1954506624>: No space left on device (28)",
        "[Errno 28] No space left on device: '/dev/shm/psm_4f2a'",
        "ERROR: Unexpected bus error encountered in worker. This might be caused by "
        "insufficient shared memory (shm)."}) {
    EXPECT_EQ(classify_error("builtins.RuntimeError", msg), ErrorKind::kShmNoSpace) << msg;
  }
  // A full disk is not /dev/shm.
  EXPECT_EQ(
      classify_error("builtins.OSError", "[Errno 28] No space left on device: '/ckpt/model.pt'"),
      ErrorKind::kOther);
  Loader l;
  auto s = session(l, shm_facts(64 * kMiB, 64 * kMiB));
  s->note(error("[Errno 28] No space left on device: '/ckpt/model.pt'", ErrorSource::kUncaught,
                "builtins.OSError"));
  EXPECT_TRUE(whole(*s).empty());
}

TEST(AnalyzeShm, SigbusDeathIsCriticalAndWorkerDiedDefersToIt) {
  Loader l;
  auto s = session(l, shm_facts(64 * kMiB, 64 * kMiB));
  s->ingest(died(1, 2001, -1, SIGBUS));
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), (std::vector<std::string>{"shm_exhausted", "worker_died"}));
  EXPECT_EQ(fs[0].severity, report::Severity::kCritical);
  EXPECT_NE(fs[0].title.find("SIGBUS"), std::string::npos);
  EXPECT_EQ(fs[1].severity, report::Severity::kWarning);
  EXPECT_EQ(Session::verdict(fs), "shm_exhausted");
}

TEST(AnalyzeShm, ObservedUseFlipsAtNinetyPercent) {
  Loader l;
  auto with_use = [&](int64_t used) {
    auto s = session(l, shm_facts(std::nullopt, std::nullopt));
    sample::MachineSample m;
    m.shm_total_bytes = 100 * kMiB;
    m.shm_used_bytes = used;
    feed_passes(*s, kT0, 20, procs(l, 10.0, 10.0), m);
    return whole(*s);
  };
  EXPECT_TRUE(loud_ids(with_use(89 * kMiB)).empty());
  auto fs = with_use(90 * kMiB);
  ASSERT_EQ(loud_ids(fs), std::vector<std::string>{"shm_exhausted"});
  EXPECT_EQ(*num(fs[0], "shm_used_peak_bytes"), double(90 * kMiB));
}

// The fix is `dldoctor check`'s (shm_fix): whole GiB, the machine's own kind first, and the
// smaller setting that fits today's size on its last line.
TEST(AnalyzeShm, FixIsWordedAsDldoctorCheckWordsItTheMachinesKindFirst) {
  Loader l;
  l.prefetch_factor = 8;  // 17 MiB in flight, 34 MiB needed; 12 MiB free fits prefetch 2
  system::Facts f = shm_facts(12 * kMiB, 12 * kMiB);
  f.container_kind = "kubernetes";
  auto s = session(l, f);
  s->note(
      error("unable to allocate shared memory(shm) for file </torch_8814_3290110147_0>: "
            "No space left on device (28)"));
  const auto fs = whole(*s);  // kept: `shm` points into it
  const report::Finding* shm = find(fs, "shm_exhausted");
  ASSERT_NE(shm, nullptr);
  const std::string& fix = shm->fix;
  EXPECT_EQ(fix.rfind("make /dev/shm at least 1 GiB (2x the 17.0 MiB in flight", 0), 0u) << fix;
  EXPECT_EQ(fix.find("\nKubernetes:"), fix.find('\n')) << fix;  // the machine's own kind first
  EXPECT_LT(fix.find("Kubernetes:"), fix.find("Docker:"));
  EXPECT_LT(fix.find("Docker:"), fix.find("bare metal:"));
  EXPECT_NE(fix.find("\nor keep fewer batches in flight: prefetch_factor=2 fits today's size "
                     "(/dev/shm has 12.0 MiB free now)"),
            std::string::npos)
      << fix;
  // Bare metal first where no container was seen; podman gets podman's command.
  EXPECT_EQ(shm_fix("", 17 * kMiB).find("\nbare metal:"), shm_fix("", 17 * kMiB).find('\n'));
  EXPECT_NE(shm_fix("podman", 17 * kMiB).find("podman run --shm-size=1g"), std::string::npos);
  EXPECT_NE(shm_fix("docker", 600 * kMiB).find("--shm-size=2g"), std::string::npos);  // 1.2 GiB
}

}  // namespace
}  // namespace dldoctor::analyze
