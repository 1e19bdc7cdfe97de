// cow_memory_growth at the edges of its thresholds: Private_Dirty growth per sample read, the
// reads and samples a slope needs, spawned workers that share nothing, the projection to the
// epoch's end against the memory available.
#include "dldoctor_core/analyze/rules/cow_memory_growth.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

/// 20 s of a healthy 2-worker loader (25 batches/s per worker of `batch` samples) in 1 s
/// chunks, a smaps read of each worker after each second with Private_Dirty
/// base + bytes_per_sample x samples, and the dataset notes.
/// `settle`: the growth stops once a worker has read that many samples (0: never).
/// `allocated`: the growth is memory the worker allocates (its RSS grows by as much), not
/// pages it shared with the main process (RSS flat).
std::vector<report::Finding> cow_run(double bytes_per_sample, int batch, int reads = 20,
                                     std::optional<int64_t> available = int64_t(64) << 30,
                                     trace::StartMethod method = trace::StartMethod::kFork,
                                     std::optional<int64_t> length = 10'000'000, int64_t settle = 0,
                                     bool allocated = false) {
  Session s;
  s.set_facts(facts(8));
  Loader l;
  l.batch_size = batch;
  l.fetch_ms = 10;
  l.step_ms = 20;
  l.jitter = 0;
  s.ingest(event(trace::EventKind::kIterStart, l.main_pid, kT0, l.id, l.num_workers,
                 l.prefetch_factor, uint32_t(batch), 0, l.main_pid, int64_t(method), 1, l.flags));
  for (int w = 0; w < l.num_workers; ++w)
    s.ingest(
        event(trace::EventKind::kWorkerStart, l.worker_pid(w), kT0, l.id, w, -1, 0, l.main_pid));
  DatasetNotes notes;
  notes.length = length;
  notes.attrs.push_back(DatasetAttr{"paths", "list", 3'000'000, 252 * kMiB, "str", true});
  notes.attrs.push_back(
      DatasetAttr{"labels", "numpy.ndarray", 3'000'000, 24 * kMiB, "int64", false});
  s.note_dataset(l.id, notes);
  int64_t samples = 0;  // per worker
  for (int k = 0; k < 20; ++k) {
    const int64_t t = kT0 + k * kS;
    feed(s, l, t, 1.0, false);
    samples += 25 * batch;
    std::vector<std::pair<int, int64_t>> pd, rss;
    if (k >= 20 - reads)
      for (int w = 0; w < l.num_workers; ++w) {
        const int64_t grown =
            int64_t(bytes_per_sample * double(settle > 0 ? std::min(samples, settle) : samples));
        pd.emplace_back(l.worker_pid(w), 10 * kMiB + grown);
        if (allocated) rss.emplace_back(l.worker_pid(w), 2048 * kMiB + grown);
      }
    pass(s, t + kS - 1, l, WorkerFigures{}, 2.0, pd, available, rss);
  }
  return s.findings(0, Window::kWholeRun);
}

TEST(AnalyzeCow, GrowthWithSamplesIsNamedWithTheAttribute) {
  // 32 samples x 25 x 20 = 16000 samples per worker at 4 KiB each: 62.5 MiB.
  auto fs = cow_run(4096, 32);
  const report::Finding* f = find(fs, "cow_memory_growth");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(*num(*f, "private_dirty_mib_per_1000_samples"), 4096.0 * 1000 / kMiB, 1e-6);
  EXPECT_EQ(*num(*f, "workers_growing"), 2);
  EXPECT_NE(text(*f, "python_object_attributes")->find("paths (list of 3000000 str"),
            std::string::npos)
      << *text(*f, "python_object_attributes");
  EXPECT_EQ(text(*f, "python_object_attributes")->find("labels"), std::string::npos);
  EXPECT_NE(f->fix.find("dataset.paths"), std::string::npos);
  EXPECT_NE(f->why.find("reference count"), std::string::npos);
  // 10M samples / 2 workers: each copies up to its 2 GiB RSS: far above 256 MiB.
  EXPECT_EQ(f->severity, report::Severity::kWarning);
}

TEST(AnalyzeCow, FlipsAtGrowth) {
  // 16000 samples per worker (15200 between the first and last read): growth = slope x 15200.
  const double per_mib = double(kMiB) / 15200;
  EXPECT_EQ(find(cow_run(31.5 * per_mib, 32), "cow_memory_growth"), nullptr);
  EXPECT_NE(find(cow_run(32.5 * per_mib, 32), "cow_memory_growth"), nullptr);
}

TEST(AnalyzeCow, FlipsAtBytesPerSample) {
  // 4096-sample batches: 2M samples per worker, so growth is large at any slope here.
  EXPECT_EQ(find(cow_run(250, 4096), "cow_memory_growth"), nullptr);
  EXPECT_NE(find(cow_run(262, 4096), "cow_memory_growth"), nullptr);
}

TEST(AnalyzeCow, NeedsThreeReads) {
  // 40 KiB per sample: the last two or three reads (800 samples apart) span 31-62 MiB.
  EXPECT_EQ(find(cow_run(40960 * 2, 32, 2), "cow_memory_growth"), nullptr);
  EXPECT_NE(find(cow_run(40960, 32, 3), "cow_memory_growth"), nullptr);
}

TEST(AnalyzeCow, FlatMemoryIsNothing) { EXPECT_TRUE(cow_run(0, 32).empty()); }

TEST(AnalyzeCow, AnEarlyRiseThatSettlesIsNotGrowth) {
  // Recorded on shm_exhausted.py --healthy (512 KiB samples): a worker's Private_Dirty rose
  // 19 -> 54 MiB over its first ~300 samples, then stayed. Here: 120 KiB a sample up to 300
  // samples (35 MiB), then flat over 16000: no finding; the same rise spread over the whole
  // run, still going on in its newer half, is growth.
  EXPECT_EQ(find(cow_run(120 * 1024, 32, 20, int64_t(64) << 30, trace::StartMethod::kFork,
                         10'000'000, 300),
                 "cow_memory_growth"),
            nullptr);
  EXPECT_EQ(
      find(cow_run(10240, 32, 20, int64_t(64) << 30, trace::StartMethod::kFork, 10'000'000, 4000),
           "cow_memory_growth"),
      nullptr);  // grew 39 MiB over its first 4000 samples, flat for the next 12000
  EXPECT_NE(find(cow_run(4096, 32), "cow_memory_growth"), nullptr);
}

/// cow_memory_growth::detect over two forked workers read alike (`points`), under the hooks
/// (per sample) or attached (`over_time`), with 16 GiB available.
std::vector<cow_memory_growth::Evidence> two_workers(const std::vector<MemoryPoint>& points,
                                                     bool over_time) {
  JobView v;
  LoaderView l;
  l.config.num_workers = 2;
  l.config.start_method = trace::StartMethod::kFork;
  for (int w = 0; w < 2; ++w)
    l.worker_memory.push_back(WorkerMemory{1000 + w, w, points, over_time});
  v.loaders.push_back(l);
  v.machine.mem_available_last_bytes = int64_t(16) << 30;
  return cow_memory_growth::detect(v);
}

/// Read under the hooks at `samples` read each, with Private_Dirty `mib` (RSS flat at 167 MiB:
/// copies of shared pages), a second apart.
std::vector<cow_memory_growth::Evidence> read_at(const std::vector<int64_t>& samples,
                                                 const std::vector<double>& mib) {
  std::vector<MemoryPoint> points;
  for (size_t i = 0; i < samples.size(); ++i)
    points.push_back(MemoryPoint{kT0 + int64_t(i) * kS, samples[i], int64_t(mib[i] * kMiB),
                                 std::nullopt, int64_t(167 * kMiB)});
  return two_workers(points, false);
}

TEST(AnalyzeCow, ACopyMadeOnceIsNotGrowth) {
  // Recorded on slow_handover.py (32 tensors a sample): each worker's Private_Dirty stayed at
  // 11 MiB, then rose to 46 MiB between two reads (a full garbage collection wrote to every
  // object it tracks) and stayed. Read right after that step, it is one interval's rise, not
  // growth with the samples: nothing until the next read shows it going on.
  const std::vector<int64_t> at = {0, 1600, 3200, 4800};
  EXPECT_TRUE(read_at(at, {11, 11, 11, 46}).empty());
  EXPECT_TRUE(read_at({0, 1600, 3200, 4800, 6400}, {11, 11, 11, 46, 46}).empty());
  // A worker of the same run whose step came in its first interval, then drifted 0.2 MiB over
  // 464 samples (450 bytes a sample, over kCowMinBytesPerSample).
  EXPECT_TRUE(read_at({336, 480, 944}, {12.5, 46.7, 46.9}).empty());
  // The same 35 MiB over the same reads, rising at each: growth.
  EXPECT_EQ(read_at(at, {11, 22.7, 34.3, 46}).size(), 1u);
  // The step, then still rising at the next read (4.4 KiB a sample): growth.
  EXPECT_EQ(read_at({0, 1600, 3200, 4800, 6400}, {11, 11, 11, 46, 53}).size(), 1u);
}

TEST(AnalyzeCow, MemoryTheWorkerAllocatesIsNotCopyOnWrite) {
  // shm_exhausted.py --healthy on a loaded machine: a worker's heap (512 KiB samples freed
  // back to malloc) grew 18.5 -> 53 MiB over 276 samples, its RSS with it. A copy turns a
  // shared page private and leaves the RSS as it was: the same private growth with the RSS
  // growing as much is the worker's own allocations.
  EXPECT_EQ(
      find(cow_run(4096, 32, 20, int64_t(64) << 30, trace::StartMethod::kFork, 10'000'000, 0, true),
           "cow_memory_growth"),
      nullptr);
  EXPECT_NE(find(cow_run(4096, 32, 20, int64_t(64) << 30, trace::StartMethod::kFork, 10'000'000, 0,
                         false),
                 "cow_memory_growth"),
            nullptr);
}

TEST(AnalyzeCow, SpawnedWorkersShareNothing) {
  EXPECT_EQ(find(cow_run(4096, 32, 20, int64_t(64) << 30, trace::StartMethod::kSpawn),
                 "cow_memory_growth"),
            nullptr);
}

TEST(AnalyzeCow, ProjectionAgainstAvailableMemorySetsSeverity) {
  // Projected: 2 workers x min(4 KiB x (5M - 16000), 2 GiB - 72.5 MiB) ~ 3.86 GiB.
  auto critical = cow_run(4096, 32, 20, int64_t(6) << 30);
  ASSERT_NE(find(critical, "cow_memory_growth"), nullptr);
  EXPECT_EQ(find(critical, "cow_memory_growth")->severity, report::Severity::kCritical);
  EXPECT_GT(*num(*find(critical, "cow_memory_growth"), "projected_growth_to_epoch_end_mib"), 3900);
  auto warning = cow_run(4096, 32, 20, int64_t(8) << 30);
  EXPECT_EQ(find(warning, "cow_memory_growth")->severity, report::Severity::kWarning);
  // A short epoch: 40000 samples, 20000 per worker, 4000 left each: 2 x 15.6 MiB more,
  // plus 59 MiB grown each so far: still above 256 MiB? no: 2 x (59 + 15.6) < 256: info.
  auto info = cow_run(4096, 32, 20, int64_t(64) << 30, trace::StartMethod::kFork, 40'000);
  ASSERT_NE(find(info, "cow_memory_growth"), nullptr);
  EXPECT_EQ(find(info, "cow_memory_growth")->severity, report::Severity::kInfo);
}

/// An attached job: no samples read, two forked workers' smaps reads every 2 s over `seconds`,
/// Private_Dirty rising at `mib_per_s` until `stop_s` (0: never); `allocated`: RSS rises with
/// it (the worker's own memory, not copies).
std::vector<cow_memory_growth::Evidence> attached(double mib_per_s, int seconds = 10,
                                                  double stop_s = 0, bool allocated = false) {
  std::vector<MemoryPoint> points;
  for (int t = 0; t <= seconds; t += 2) {
    const double grown = mib_per_s * kMiB * (stop_s > 0 ? std::min<double>(t, stop_s) : t);
    const int64_t rss = int64_t(450 * kMiB + (allocated ? grown : 0));
    points.push_back(MemoryPoint{kT0 + t * kS, 0, int64_t(10 * kMiB + grown), std::nullopt, rss});
  }
  return two_workers(points, true);
}

TEST(AnalyzeCow, AttachedGrowthIsReadOverTime) {
  auto es = attached(5);
  ASSERT_EQ(es.size(), 1u);
  EXPECT_TRUE(es[0].over_time);
  EXPECT_NEAR(es[0].slope_mean, 5 * kMiB, 1);
  // 10 minutes at 5 MiB/s is more than each still shares (450 - 60 MiB): capped there.
  EXPECT_NEAR(es[0].projected_more, 2 * (450 - 60) * kMiB, 1);
  EXPECT_EQ(es[0].rank.severity, report::Severity::kWarning);
  const report::Finding f = cow_memory_growth::finding(es[0]);
  EXPECT_NEAR(*num(f, "private_dirty_mib_per_s"), 5, 1e-9);
  EXPECT_NE(text(f, "samples_read")->find("unknown"), std::string::npos);
  EXPECT_NE(f.title.find("a second"), std::string::npos) << f.title;
}

TEST(AnalyzeCow, AttachedEdges) {
  EXPECT_TRUE(attached(0.9).empty());                         // under 1 MiB/s
  EXPECT_TRUE(attached(5, 2).empty());                        // 2 s: too short a span
  EXPECT_TRUE(attached(5, 10, 4).empty());                    // stopped in the newer half
  EXPECT_TRUE(attached(5, 10, 0, /*allocated=*/true).empty());  // its own memory
  EXPECT_EQ(attached(1.7).size(), 1u);                        // 17 MiB over 10 s
  EXPECT_TRUE(attached(1.5).empty());                         // 15 MiB: under 16 MiB copied
}

}  // namespace
}  // namespace dldoctor::analyze
