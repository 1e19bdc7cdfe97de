// The GPU's idle share beside the data stall (analyze/gpu_track, analyze/gpu_idle) on
// synthetic passes carrying the GPU part a sampler would read through NVML: which GPUs are
// the job's, over which window, and what a fetch finding says when there is no figure.
#include <gtest/gtest.h>

#include "analyze_sim.hpp"
#include "dldoctor_core/analyze/gpu_idle.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

/// One device as a pass would carry it.
sample::GpuSample gpu(int index, std::optional<double> util, std::vector<int> job_pids = {}) {
  sample::GpuSample g;
  g.index = index;
  g.utilization_pct = util;
  g.memory_total_bytes = 80 * kGiB;
  g.memory_used_bytes = 20 * kGiB;
  g.tree_pids = std::move(job_pids);
  g.tree_memory_bytes = g.tree_pids.empty() ? 0 : 19 * kGiB;
  return g;
}

/// Passes every 100 ms over [t0, t0 + seconds) with the loader's processes and `devices`.
void gpu_passes(Session& s, const Loader& l, int64_t t0, double seconds,
                const std::vector<sample::GpuSample>& devices, bool measured = true,
                const std::string& why = "") {
  for (int64_t t = t0; t < t0 + int64_t(seconds * kS); t += 100 * kMs) {
    sample::Snapshot snap;
    snap.t_ns = t;
    for (const Proc& p : procs(l, 30.0, 95.0, 1.0, 3.0)) {
      sample::ProcessSample x;
      x.pid = p.pid;
      x.ppid = p.ppid;
      x.cpu_pct = p.cpu_pct;
      x.runq_delay_pct = p.runq_delay_pct;
      x.involuntary_cs_per_s = p.ics_per_s;
      snap.processes.push_back(x);
    }
    snap.gpu.measured = measured;
    snap.gpu.not_measured = why;
    if (measured) snap.gpu.devices = devices;
    s.ingest(snap);
  }
}

struct GpuRun {
  Session s;
  std::vector<report::Finding> whole, recent;
};

/// 20 s of a CPU-bound loader (slow_getitem, 60% stall) with the given GPU passes.
std::unique_ptr<GpuRun> starved(const std::vector<sample::GpuSample>& devices, bool measured = true,
                                const std::string& why = "") {
  auto r = std::make_unique<GpuRun>();
  Loader l = cpu_bound();
  r->s.set_facts(facts(8));
  const int64_t end = feed(r->s, l, kT0, 20);
  gpu_passes(r->s, l, kT0, 20, devices, measured, why);
  r->whole = r->s.findings(0, Window::kWholeRun);
  r->recent = r->s.findings(end, Window::kRecent);
  return r;
}

TEST(GpuIdle, AFetchFindingShowsTheGpuIdleShareBesideTheStall) {
  auto r = starved({gpu(0, 36.0, {1000})});  // the main process (pid 1000) is on GPU 0
  const report::Finding* f = find(r->whole, "slow_getitem");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(*num(*f, "gpu_idle_fraction"), 0.64, 1e-9);
  EXPECT_NEAR(*num(*f, "gpu_utilization_pct"), 36.0, 1e-9);
  const std::string s = *text(*f, "gpu_idle");
  EXPECT_NE(s.find("the GPU ran no kernel 64% of the loop while the main process waited for "
                   "batches 60% of it"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("not how busy the GPU was"), std::string::npos) << s;  // NVML's caveat
  const report::Finding* recent = find(r->recent, "slow_getitem");
  ASSERT_NE(recent, nullptr);
  EXPECT_NEAR(*num(*recent, "gpu_idle_fraction"), 0.64, 1e-9);
}

TEST(GpuIdle, WithoutNvmlTheFindingSaysNotMeasuredAndNeverZero) {
  auto r = starved({}, false, "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)");
  const report::Finding* f = find(r->whole, "slow_getitem");
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(num(*f, "gpu_idle_fraction"));
  EXPECT_FALSE(num(*f, "gpu_utilization_pct"));
  EXPECT_EQ(*text(*f, "gpu_idle"),
            "GPU not measured: libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)");
  // No pass at all (a sampler without GPU reading): still a reason, not a figure.
  Session s;
  s.set_facts(facts(8));
  feed(s, cpu_bound(), kT0, 20);
  feed_passes(s, kT0, 20, procs(cpu_bound(), 30.0, 95.0, 1.0, 3.0));
  const std::vector<report::Finding> fs = whole(s);
  const report::Finding* g = find(fs, "slow_getitem");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(text(*g, "gpu_idle")->rfind("GPU not measured: ", 0), 0u);
}

TEST(GpuIdle, OnlyTheJobsGpusCount) {
  // GPU 0 runs another job at 95%; the job's main process is on GPU 1, idle 80%.
  auto r = starved({gpu(0, 95.0, {}), gpu(1, 20.0, {1000})});
  const report::Finding* f = find(r->whole, "slow_getitem");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(*num(*f, "gpu_idle_fraction"), 0.8, 1e-9);
  EXPECT_EQ(text(*f, "gpu_idle")->rfind("the GPU ran", 0), 0u);
  // Two GPUs of the job (two ranks): the mean of the two.
  auto two = starved({gpu(0, 40.0, {1000}), gpu(1, 20.0, {2000}), gpu(2, 99.0)});
  const report::Finding* g = find(two->whole, "slow_getitem");
  ASSERT_NE(g, nullptr);
  EXPECT_NEAR(*num(*g, "gpu_utilization_pct"), 30.0, 1e-9);
  EXPECT_EQ(text(*g, "gpu_idle")->rfind("the job's 2 GPUs ran no kernel 70%", 0), 0u);
}

TEST(GpuIdle, AJobOnNoGpuHasNoIdleShareUnlessItUsedCuda) {
  auto r = starved({gpu(0, 50.0), gpu(1, 50.0)});
  const report::Finding* f = find(r->whole, "slow_getitem");
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(num(*f, "gpu_idle_fraction"));
  EXPECT_EQ(*text(*f, "gpu_idle"),
            "the job used no GPU (none of its processes on the 2 GPUs NVML lists)");
  // It did use CUDA (its CUDA memory notes), but NVML shows no pid of it (a container's own
  // pid namespace): every GPU counts, and the evidence says so.
  Session s;
  Loader l = cpu_bound();
  s.set_facts(facts(8));
  feed(s, l, kT0, 20);
  s.note(cuda_note(4 * kGiB, 2 * kGiB, 80 * kGiB));
  gpu_passes(s, l, kT0, 20, {gpu(0, 10.0), gpu(1, 30.0)});
  const std::vector<report::Finding> fs = whole(s);
  const report::Finding* g = find(fs, "slow_getitem");
  ASSERT_NE(g, nullptr);
  EXPECT_NEAR(*num(*g, "gpu_idle_fraction"), 0.8, 1e-9);
  EXPECT_NE(text(*g, "gpu_idle")->find("another pid namespace"), std::string::npos);
}

TEST(GpuIdle, UtilizationRefusedIsUnknown) {
  auto r = starved({gpu(0, std::nullopt, {1000})});  // MIG: NVML refuses utilization
  const report::Finding* f = find(r->whole, "slow_getitem");
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(num(*f, "gpu_idle_fraction"));
  EXPECT_NE(text(*f, "gpu_idle")->find("GPU utilization not measured"), std::string::npos);
}

TEST(GpuIdle, TheWholeRunCountsTheLoopAndTheRecentWindowItsOwnPasses) {
  Session s;
  Loader l = cpu_bound();
  s.set_facts(facts(8));
  // Before the first event the model is built and the GPU idles: not the loop's idle time.
  gpu_passes(s, l, kT0 - 5 * kS, 5, {gpu(0, 0.0, {1000})});
  const int64_t end = feed(s, l, kT0, 20);
  gpu_passes(s, l, kT0, 10, {gpu(0, 20.0, {1000})});
  gpu_passes(s, l, kT0 + 10 * kS, 10, {gpu(0, 80.0, {1000})});
  EXPECT_NEAR(*gpu_idle(s.view(0, Window::kWholeRun)).utilization_pct, 50.0, 1e-9);
  EXPECT_NEAR(*gpu_idle(s.view(end, Window::kRecent)).utilization_pct, 80.0, 1e-9);
  GpuView v = s.view(0, Window::kWholeRun).gpu;
  ASSERT_EQ(v.devices.size(), 1u);
  EXPECT_TRUE(v.devices[0].job);
  EXPECT_EQ(*v.devices[0].job_memory_max_bytes, 19 * kGiB);
  EXPECT_EQ(*v.devices[0].memory_total_bytes, 80 * kGiB);
  EXPECT_EQ(v.devices[0].passes, 200);
}

}  // namespace
}  // namespace dldoctor::analyze
