// The monitor's recorders on hand-made streams: the series' points, rates and downsampling,
// the live window, and the trace store's cap.
#include <gtest/gtest.h>

#include "analyze_sim.hpp"
#include "dldoctor_core/monitor/series.hpp"
#include "dldoctor_core/monitor/trace_store.hpp"

namespace dldoctor::monitor {
namespace {

using analyze::sim::event;
using analyze::sim::kMs;
using analyze::sim::kS;
using analyze::sim::kT0;
using trace::EventKind;

constexpr int kMain = 100, kW0 = 101, kW1 = 102;

std::vector<trace::Event> iter_start(int64_t t) {
  return {event(EventKind::kIterStart, kMain, t, 0, 2, 0, 8, 0, kMain, 1, 1),
          event(EventKind::kWorkerStart, kW0, t + 1 * kMs, 0, 0, -1, 0, kMain),
          event(EventKind::kWorkerStart, kW1, t + 1 * kMs, 0, 1, -1, 0, kMain)};
}

/// A loader handing out `per_s` batches a second for `seconds`, each waited for `wait` and
/// stepped for the rest of its period; worker w = index % 2 fetched it (getitem 10 ms per
/// sample of 8, collate 2 ms).
std::vector<trace::Event> steady(int64_t from, int seconds, int per_s, int64_t wait) {
  std::vector<trace::Event> out;
  const int64_t period = kS / per_s;
  for (int i = 0; i < seconds * per_s; ++i) {
    const int64_t t = from + i * period;
    const int w = i % 2;
    out.push_back(event(EventKind::kWorkerBatch, w ? kW1 : kW0, t - 90 * kMs, 0, w, i, 8, 82 * kMs,
                        2 * kMs, 80 * kMs, 4096));
    out.push_back(
        event(EventKind::kMainBatch, kMain, t, 0, w, i, 0, wait, i == 0 ? -1 : period - wait, -1));
  }
  return out;
}

sample::Snapshot pass(int64_t t, double worker_cpu, char state = 'R') {
  sample::Snapshot s;
  s.t_ns = t;
  for (int pid : {kMain, kW0, kW1}) {
    sample::ProcessSample p;
    p.pid = pid;
    p.state = pid == kMain ? 'S' : state;
    p.cpu_pct = pid == kMain ? 10.0 : worker_cpu;
    p.runq_delay_pct = 5.0;
    p.read_bytes_per_s = 1e6;
    s.processes.push_back(p);
  }
  sample::ProcessSample stranger;  // in the tree, but no event named it: only its reads count
  stranger.pid = 999;
  stranger.cpu_pct = 50;
  stranger.read_bytes_per_s = 2e6;
  s.processes.push_back(stranger);
  s.machine.shm_used_bytes = 1 << 20;
  s.machine.shm_total_bytes = 64 << 20;
  s.machine.mem_available_bytes = int64_t(8) << 30;
  s.machine.cpu_busy_pct = 60;
  return s;
}

TEST(SeriesRecorder, PointsRatesAndProcesses) {
  SeriesRecorder r;
  r.start(kT0);
  r.ingest(iter_start(kT0));
  r.ingest(steady(kT0 + kS, 4, 10, 60 * kMs));  // 10 batches/s, waited 60 of 100 ms
  for (int i = 0; i < 50; ++i) r.ingest(pass(kT0 + i * 100 * kMs, 90.0));

  const SeriesData d = r.data();
  EXPECT_EQ(d.width_ns, kSeriesBaseWidthNs);
  ASSERT_EQ(d.t_s.size(), 10u);  // 5 s of 0.5 s points
  ASSERT_EQ(d.loaders.size(), 1u);
  const LoaderSeries& l = d.loaders[0];
  EXPECT_EQ(l.batches, 40);
  EXPECT_FALSE(l.batches_per_s[0]);  // before the first batch: unknown, not 0
  EXPECT_FALSE(l.batches_per_s[1]);
  ASSERT_TRUE(l.batches_per_s[5]);
  EXPECT_NEAR(*l.batches_per_s[5], 10.0, 0.5);
  ASSERT_TRUE(l.data_stall_pct[6]);
  EXPECT_NEAR(*l.data_stall_pct[6], 60.0, 0.5);

  ASSERT_EQ(d.processes.size(), 3u);  // main + two workers; the stranger has no series
  int workers = 0;
  for (const ProcessSeries& p : d.processes) {
    ASSERT_EQ(p.cpu_pct.size(), 10u);
    ASSERT_TRUE(p.cpu_pct[2]);
    if (p.role == "main") {
      EXPECT_EQ(p.pids, std::vector<int>{kMain});
      EXPECT_DOUBLE_EQ(*p.cpu_pct[2], 10.0);
      EXPECT_EQ(p.state[2], 'S');
      continue;
    }
    ++workers;
    EXPECT_DOUBLE_EQ(*p.cpu_pct[2], 90.0);
    EXPECT_EQ(p.state[2], 'R');
    EXPECT_EQ(p.batches, 20);
    ASSERT_TRUE(p.getitem_ms[4]);
    EXPECT_NEAR(*p.getitem_ms[4], 10.0, 1e-6);  // (82 - 2) ms / 8 samples
    EXPECT_NEAR(*p.collate_ms[4], 2.0, 1e-6);
    EXPECT_EQ(p.getitem_ms_sample.size(), 20u);
  }
  EXPECT_EQ(workers, 2);
  ASSERT_TRUE(d.machine.read_mb_per_s[2]);
  EXPECT_NEAR(*d.machine.read_mb_per_s[2], 5.0, 1e-9);  // every process of the tree reads
  EXPECT_EQ(d.machine.shm_total_bytes, 64 << 20);
  EXPECT_NEAR(*d.machine.shm_used_bytes[3], double(1 << 20), 1);
}

TEST(SeriesRecorder, LongRunMergesPointsAndStaysBounded) {
  SeriesRecorder r;
  r.start(kT0);
  r.ingest(iter_start(kT0));
  const int seconds = 2000;  // 720 points of 2 s are too few: merges three times, to 4 s
  for (int s = 0; s < seconds; s += 10) {
    r.ingest(steady(kT0 + s * kS, 10, 4, 10 * kMs));
    for (int i = 0; i < 10; ++i) r.ingest(pass(kT0 + (s + i) * kS, 50.0));
  }
  const SeriesData d = r.data();
  EXPECT_LE(d.t_s.size(), kMaxSeriesPoints);
  EXPECT_EQ(d.width_ns, 8 * kSeriesBaseWidthNs);
  ASSERT_FALSE(d.loaders.empty());
  const auto& bps = d.loaders[0].batches_per_s;
  ASSERT_TRUE(bps[bps.size() / 2]);
  EXPECT_NEAR(*bps[bps.size() / 2], 4.0, 0.3);  // merged points keep the rate
  for (const ProcessSeries& p : d.processes) {
    EXPECT_EQ(p.cpu_pct.size(), d.t_s.size());
    EXPECT_LE(p.getitem_ms_sample.size(), kDistSamples);
  }
}

TEST(SeriesRecorder, LiveWindowFollowsTheNewestSeconds) {
  SeriesRecorder r;
  r.start(kT0);
  r.ingest(iter_start(kT0));
  r.ingest(steady(kT0 + kS, 3, 20, 5 * kMs));
  r.ingest(pass(kT0 + 3 * kS, 95.0, 'R'));
  LiveData now = r.live(kT0 + 4 * kS);
  ASSERT_EQ(now.loaders.size(), 1u);
  ASSERT_TRUE(now.loaders[0].batches_per_s);
  EXPECT_NEAR(*now.loaders[0].batches_per_s, 20.0, 2.0);
  EXPECT_EQ(now.loaders[0].num_workers, 2);
  ASSERT_EQ(now.processes.size(), 3u);
  for (const auto& p : now.processes) {
    if (p.role != "worker") continue;
    EXPECT_EQ(p.state, 'R');
    EXPECT_DOUBLE_EQ(*p.cpu_pct, 95.0);
    EXPECT_NEAR(*p.getitem_ms, 10.0, 1e-6);
  }
  EXPECT_EQ(now.shm_total_bytes, 64 << 20);

  // Ten seconds later with no batch: the rate is 0 (known), not unknown.
  LiveData later = r.live(kT0 + 14 * kS);
  ASSERT_TRUE(later.loaders[0].batches_per_s);
  EXPECT_DOUBLE_EQ(*later.loaders[0].batches_per_s, 0.0);
  EXPECT_FALSE(later.loaders[0].data_stall_pct);
}

TEST(TraceStore, KeepsUpToTheCapAndCountsTheRest) {
  TraceStore t(100);
  t.ingest(steady(kT0, 4, 10, 5 * kMs));  // 80 events
  t.ingest(steady(kT0 + 4 * kS, 4, 10, 5 * kMs));
  t.ingest(pass(kT0, 10.0));
  TraceContents c = t.contents();
  EXPECT_EQ(c.events.size(), 100u);
  EXPECT_EQ(c.dropped_events, 60u);
  EXPECT_EQ(c.max_events, 100u);
  EXPECT_EQ(c.machine.size(), 1u);
  EXPECT_EQ(c.processes.size(), 4u);
  EXPECT_EQ(c.events.front().kind, EventKind::kWorkerBatch);
}

// --- the GPU part (synthetic passes in the shape sample/gpu_reader gives; no GPU here) -------

sample::Snapshot gpu_pass(int64_t t, double util, std::optional<int64_t> job_bytes) {
  sample::Snapshot s = pass(t, 50.0);
  s.gpu.measured = true;
  sample::GpuSample g;
  g.index = 3;
  g.utilization_pct = util;
  g.memory_used_bytes = int64_t(20) << 30;
  g.memory_total_bytes = int64_t(80) << 30;
  g.tree_memory_bytes = job_bytes;
  if (job_bytes && *job_bytes > 0) g.tree_pids = {kMain};
  s.gpu.devices.push_back(g);
  return s;
}

TEST(SeriesRecorder, GpuSeriesPerDeviceAndTheLiveLine) {
  SeriesRecorder r;
  r.start(kT0);
  r.ingest(iter_start(kT0));
  for (int i = 0; i < 20; ++i)  // 2 s at 10 Hz: 20% then 80%
    r.ingest(gpu_pass(kT0 + i * 100 * kMs, i < 10 ? 20.0 : 80.0, int64_t(19) << 30));
  const SeriesData d = r.data();
  ASSERT_EQ(d.gpus.size(), 1u);
  const GpuSeries& g = d.gpus[0];
  EXPECT_EQ(g.index, 3);
  EXPECT_TRUE(g.job);
  EXPECT_EQ(g.memory_total_bytes, int64_t(80) << 30);
  ASSERT_EQ(g.utilization_pct.size(), d.t_s.size());
  EXPECT_NEAR(*g.utilization_pct[0], 20.0, 1e-9);  // points of 0.5 s: means of their passes
  EXPECT_NEAR(*g.utilization_pct[3], 80.0, 1e-9);
  EXPECT_NEAR(*g.job_memory_bytes[1], double(int64_t(19) << 30), 1);
  EXPECT_TRUE(d.gpu_not_measured.empty());
  LiveData now = r.live(kT0 + 2 * kS);
  ASSERT_EQ(now.gpus.size(), 1u);
  EXPECT_EQ(*now.gpus[0].utilization_pct, 80.0);
  EXPECT_TRUE(now.gpus[0].job);
}

TEST(SeriesRecorder, NoGpuSeriesWithoutNvmlAndTheReasonKept) {
  SeriesRecorder r;
  r.start(kT0);
  sample::Snapshot s = pass(kT0, 10.0);
  s.gpu.not_measured = "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)";
  r.ingest(s);
  const SeriesData d = r.data();
  EXPECT_TRUE(d.gpus.empty());
  EXPECT_EQ(d.gpu_not_measured, s.gpu.not_measured);
  EXPECT_EQ(r.live(kT0).gpu_not_measured, s.gpu.not_measured);
  EXPECT_TRUE(r.live(kT0).gpus.empty());
}

TEST(SeriesRecorder, GpuPointsMergeWithTheRest) {
  SeriesRecorder r;
  r.start(kT0);
  for (int i = 0; i < 2000; ++i) r.ingest(gpu_pass(kT0 + i * kS, 50.0, 0));
  const SeriesData d = r.data();
  ASSERT_EQ(d.gpus.size(), 1u);
  EXPECT_EQ(d.gpus[0].utilization_pct.size(), d.t_s.size());
  EXPECT_LE(d.t_s.size(), kMaxSeriesPoints);
  EXPECT_FALSE(d.gpus[0].job);  // 0 bytes of the job on it: not the job's GPU
  EXPECT_NEAR(*d.gpus[0].utilization_pct[d.t_s.size() / 2], 50.0, 1e-9);
}

TEST(TraceStore, KeepsGpuCountersWithinTheSameCap) {
  TraceStore t(8);
  for (int i = 0; i < 3; ++i) t.ingest(gpu_pass(kT0 + i * 100 * kMs, 40.0 + i, 512 << 20));
  TraceContents c = t.contents();  // each pass: 1 machine + 4 processes + 1 GPU counter
  ASSERT_EQ(c.gpus.size(), 1u);
  EXPECT_EQ(c.gpus[0].index, 3);
  EXPECT_EQ(*c.gpus[0].utilization_pct, 40.0);
  EXPECT_EQ(*c.gpus[0].job_memory_bytes, 512 << 20);
  EXPECT_EQ(c.dropped_counters, 12u);
}

}  // namespace
}  // namespace dldoctor::monitor
