// The NVML reader (system/nvml, system/gpu, sample/gpu_reader) without a GPU: the driver's
// library absent (this machine), a real library that lacks NVML's symbols (libm), and the
// stand-in libraries of tests/cpp/support/fake_nvml.cpp for the reader's flow. None of these
// proves the ABI against a real driver; bench/gpu_check.py does, on a GPU.
#include "dldoctor_core/system/gpu.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "dldoctor_core/sample/gpu_reader.hpp"
#include "dldoctor_core/sample/sampler.hpp"
#include "dldoctor_core/system/collect.hpp"
#include "dldoctor_core/system/nvml.hpp"

namespace dldoctor {
namespace {

using system::Nvml;

constexpr int64_t kMiB = 1 << 20;

/// Sets the stand-in's environment for one test and clears it after.
class FakeEnv {
 public:
  FakeEnv& set(const char* name, const std::string& value) {
    setenv(name, value.c_str(), 1);
    names_.push_back(name);
    return *this;
  }
  ~FakeEnv() {
    for (const char* n : names_) unsetenv(n);
  }

 private:
  std::vector<const char*> names_;
};

TEST(Nvml, AbsentLibraryIsNotMeasuredWithTheReason) {
  Nvml nvml("libnvidia-ml-absent-for-test.so.1");
  EXPECT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.error(), "libnvidia-ml-absent-for-test.so.1 not found");
  EXPECT_EQ(nvml.device_count(), 0);
  EXPECT_FALSE(nvml.utilization(0));
  EXPECT_FALSE(nvml.memory(0));
  EXPECT_FALSE(nvml.compute_processes(0));
  system::GpuFacts g = system::read_gpus(nvml);
  EXPECT_FALSE(g.measured);
  EXPECT_EQ(g.not_measured, nvml.error());
  EXPECT_TRUE(g.devices.empty());
}

TEST(Nvml, TheDriversLibraryOnThisMachine) {
  const Nvml& nvml = Nvml::shared();
  if (nvml.ok()) GTEST_SKIP() << "an NVIDIA driver is installed here: bench/gpu_check.py's case";
  if (std::getenv("DLDOCTOR_NVML_LIBRARY")) GTEST_SKIP() << "DLDOCTOR_NVML_LIBRARY is set";
  EXPECT_EQ(nvml.error(), "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)");
  system::Facts f = system::collect();
  EXPECT_FALSE(f.gpu.measured);
  EXPECT_EQ(f.gpu.not_measured, nvml.error());
}

TEST(Nvml, ALibraryWithoutNvmlsSymbolsSaysWhichIsMissing) {
  Nvml nvml("libm.so.6");  // a real library, loaded, without a single NVML entry point
  EXPECT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.error(),
            "libm.so.6 lacks nvmlInit_v2 (not NVML, or a driver older than NVML 5.319)");
  EXPECT_FALSE(nvml.driver_version());
  EXPECT_FALSE(nvml.name(0));
}

TEST(Nvml, AnInitErrorIsTheReason) {
  FakeEnv env;
  env.set("FAKE_NVML_INIT", "9");  // NVML_ERROR_DRIVER_NOT_LOADED
  Nvml nvml(FAKE_NVML_PATH);
  EXPECT_FALSE(nvml.ok());
  EXPECT_EQ(nvml.error(), "nvmlInit_v2: Driver Not Loaded");
}

TEST(Nvml, ReadsDevicesThroughTheStandIn) {
  FakeEnv env;
  env.set("FAKE_NVML_DEVICES", "2")
      .set("FAKE_NVML_UTIL", "37,81")
      .set("FAKE_NVML_TOTAL_MIB", "81920")
      .set("FAKE_NVML_USED_MIB", "2048");
  Nvml nvml(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok()) << nvml.error();
  ASSERT_EQ(nvml.device_count(), 2);
  EXPECT_EQ(*nvml.utilization(0).value, 37);
  EXPECT_EQ(*nvml.utilization(1).value, 81);
  EXPECT_EQ(nvml.memory(1).value->total, 81920 * kMiB);
  EXPECT_EQ(nvml.memory(1).value->used, 2048 * kMiB);
  EXPECT_EQ(*nvml.name(1).value, "Fake GPU 1");
  EXPECT_EQ(*nvml.driver_version().value, "999.99.fake");
  EXPECT_FALSE(nvml.utilization(2));  // out of range: unknown, not 0
  system::GpuFacts g = system::read_gpus(nvml);
  ASSERT_TRUE(g.measured);
  ASSERT_EQ(g.devices.size(), 2u);
  EXPECT_EQ(g.devices[1].index, 1);
  EXPECT_EQ(g.devices[1].uuid, "GPU-fake-1");
  EXPECT_EQ(*g.devices[0].utilization_pct, 37);
  EXPECT_EQ(*g.devices[0].memory_total_bytes, 81920 * kMiB);
}

TEST(Nvml, UtilizationRefusedStaysUnknownAndTheDeviceIsListed) {
  FakeEnv env;
  env.set("FAKE_NVML_UTIL_RC", "3");  // NOT_SUPPORTED, as on a MIG-enabled GPU
  Nvml nvml(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok());
  auto u = nvml.utilization(0);
  EXPECT_FALSE(u);
  EXPECT_EQ(u.error, "Not Supported");
  system::GpuFacts g = system::read_gpus(nvml);
  ASSERT_EQ(g.devices.size(), 1u);
  EXPECT_FALSE(g.devices[0].utilization_pct);
  EXPECT_TRUE(g.devices[0].memory_total_bytes);
}

TEST(Nvml, ProcessListsGrowPastTheFirstBufferAndUnknownMemoryStaysUnknown) {
  FakeEnv env;
  env.set("FAKE_NVML_PIDS", "111,222").set("FAKE_NVML_EXTRA_PROCS", "100");
  Nvml nvml(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok());
  auto procs = nvml.compute_processes(0);
  ASSERT_TRUE(procs) << procs.error;
  ASSERT_EQ(procs.value->size(), 102u);  // past the first 32: NVML_ERROR_INSUFFICIENT_SIZE
  EXPECT_EQ((*procs.value)[1].pid, 222);
  EXPECT_EQ(*(*procs.value)[1].used_bytes, 512 * kMiB);
  env.set("FAKE_NVML_PROC_MIB", "na");  // NVML_VALUE_NOT_AVAILABLE
  auto na = nvml.compute_processes(0);
  ASSERT_TRUE(na);
  EXPECT_FALSE((*na.value)[0].used_bytes);
}

TEST(Nvml, TheV1ProcessEntryPointAndItsSmallerStruct) {
  // A driver before NVML 11 exports only nvmlDeviceGetComputeRunningProcesses, whose entries
  // are 16 bytes, not the 24 of nvmlProcessInfo_v2_t: read with the wrong one, every second
  // pid would be garbage.
  FakeEnv env;
  env.set("FAKE_NVML_PIDS", "11,22,33").set("FAKE_NVML_PROC_MIB", "7");
  Nvml nvml(FAKE_NVML_V1_PATH);
  ASSERT_TRUE(nvml.ok());
  auto procs = nvml.compute_processes(0);
  ASSERT_TRUE(procs) << procs.error;
  ASSERT_EQ(procs.value->size(), 3u);
  EXPECT_EQ((*procs.value)[2].pid, 33);
  EXPECT_EQ(*(*procs.value)[2].used_bytes, 7 * kMiB);
}

TEST(GpuReader, WithoutNvmlThePassSaysWhy) {
  Nvml nvml("libm.so.6");
  sample::GpuReader reader(nvml);
  sample::GpuPass p = reader.read({getpid()}, true);
  EXPECT_FALSE(p.measured);
  EXPECT_NE(p.not_measured.find("lacks nvmlInit_v2"), std::string::npos);
  EXPECT_TRUE(p.devices.empty());
}

TEST(GpuReader, TheTreesProcessesAndTheirMemory) {
  FakeEnv env;
  const int me = getpid();
  env.set("FAKE_NVML_PIDS", std::to_string(me) + ",999999").set("FAKE_NVML_PROC_MIB", "300");
  Nvml nvml(FAKE_NVML_PATH);
  ASSERT_TRUE(nvml.ok());
  sample::GpuReader reader(nvml);
  sample::GpuPass p = reader.read({1, me}, true);
  ASSERT_TRUE(p.measured);
  ASSERT_EQ(p.devices.size(), 1u);
  const sample::GpuSample& g = p.devices[0];
  EXPECT_EQ(*g.utilization_pct, 37.0);
  EXPECT_EQ(g.tree_pids, std::vector<int>{me});  // 999999 is not the tree's
  EXPECT_EQ(*g.tree_memory_bytes, 300 * kMiB);   // only the tree's process counts
  // Between slow passes the process figures repeat; utilization and memory are read anew.
  env.set("FAKE_NVML_UTIL", "90").set("FAKE_NVML_PIDS", "");
  sample::GpuPass fast = reader.read({1, me}, false);
  EXPECT_EQ(*fast.devices[0].utilization_pct, 90.0);
  EXPECT_EQ(*fast.devices[0].tree_memory_bytes, 300 * kMiB);
  sample::GpuPass slow = reader.read({1, me}, true);
  EXPECT_EQ(*slow.devices[0].tree_memory_bytes, 0);  // read: none of the tree's now
  EXPECT_TRUE(slow.devices[0].tree_pids.empty());
  // A process of the tree whose memory NVML cannot tell: the sum is unknown, not smaller.
  env.set("FAKE_NVML_PIDS", std::to_string(me)).set("FAKE_NVML_PROC_MIB", "na");
  EXPECT_FALSE(reader.read({me}, true).devices[0].tree_memory_bytes);
}

TEST(GpuReader, ASamplerPassCarriesTheGpuPart) {
  sample::SamplerOptions o;
  o.gpus = true;
  sample::Sampler s(getpid(), o);
  sample::Snapshot snap = s.sample_once();
  if (Nvml::shared().ok()) {
    EXPECT_TRUE(snap.gpu.measured);
  } else {  // this machine: no driver, and the pass says so instead of failing
    EXPECT_FALSE(snap.gpu.measured);
    EXPECT_EQ(snap.gpu.not_measured, Nvml::shared().error());
  }
  sample::Sampler off(getpid(), sample::SamplerOptions{});
  EXPECT_EQ(off.sample_once().gpu.not_measured, "GPU sampling is off");
}

}  // namespace
}  // namespace dldoctor
