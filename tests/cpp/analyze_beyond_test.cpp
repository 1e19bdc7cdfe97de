// The issue-6 rules (thread_oversubscription, cow_memory_growth, worker_startup_cost,
// straggler_worker) at the edges of their named thresholds, on synthetic streams and passes
// (analyze_sim.hpp); the thread-pool reader on fixed texts; active threads on real threads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "analyze_sim.hpp"
#include "dldoctor_core/analyze/rules.hpp"
#include "dldoctor_core/sample/sampler.hpp"
#include "dldoctor_core/sample/thread_pools.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;
constexpr int64_t kMiB = 1024 * 1024;

/// A sampler pass of the main process and `l`'s workers with thread and memory figures.
struct WorkerFigures {
  int num_threads = 1;
  std::optional<int> active_threads = 1;
  std::optional<double> runq = 2.0;
  std::optional<double> ics = 20.0;
  double cpu = 50;
};

void pass(Session& s, int64_t t, const Loader& l, const WorkerFigures& w,
          std::optional<double> main_runq = 2.0,
          std::vector<std::pair<int, int64_t>> private_dirty = {},
          std::optional<int64_t> mem_available = std::nullopt) {
  sample::Snapshot snap;
  snap.t_ns = t;
  snap.machine.mem_available_bytes = mem_available;
  sample::ProcessSample m;
  m.pid = l.main_pid;
  m.num_threads = 4;
  m.active_threads = 1;
  m.cpu_pct = 20;
  m.runq_delay_pct = main_runq;
  snap.processes.push_back(m);
  for (int i = 0; i < l.num_workers; ++i) {
    sample::ProcessSample p;
    p.pid = l.worker_pid(i);
    p.ppid = l.main_pid;
    p.state = 'R';
    p.num_threads = w.num_threads;
    p.active_threads = w.active_threads;
    p.cpu_pct = w.cpu;
    p.runq_delay_pct = w.runq;
    p.involuntary_cs_per_s = w.ics;
    p.rss_bytes = int64_t(2048) * kMiB;
    for (auto [pid, pd] : private_dirty)
      if (pid == p.pid) {
        p.smaps_fresh = true;
        p.private_dirty_bytes = pd;
        p.pss_bytes = pd + 100 * kMiB;
      }
    snap.processes.push_back(p);
  }
  s.ingest(snap);
}

// --- thread_oversubscription ---------------------------------------------------------------

/// A stalled 2-worker loader (fetch 100 ms, step 20 ms: 60% stall) with these worker figures.
std::vector<report::Finding> threads_run(const WorkerFigures& w, double usable = 2,
                                         std::optional<double> main_runq = 2.0,
                                         double step_ms = 20, int workers = 2) {
  Session s;
  s.set_facts(facts(usable));
  Loader l;
  l.num_workers = workers;
  l.fetch_ms = 100;
  l.step_ms = step_ms;
  feed(s, l, kT0, 20);
  for (int64_t t = kT0; t < kT0 + 20 * kS; t += 100 * kMs) pass(s, t, l, w, main_runq);
  return s.findings(0, Window::kWholeRun);
}

WorkerFigures oversubscribed() {
  WorkerFigures w;
  w.num_threads = 10;
  w.active_threads = 8;
  w.runq = 300;
  w.ics = 5000;
  w.cpu = 90;
  return w;
}

TEST(AnalyzeThreads, PoolsQueueingIsCriticalWithTheCapAndPools) {
  auto fs = threads_run(oversubscribed());
  const report::Finding* f = find(fs, "thread_oversubscription");
  ASSERT_NE(f, nullptr) << ids(fs).size();
  EXPECT_EQ(f->severity, report::Severity::kCritical);
  EXPECT_EQ(*num(*f, "active_threads_per_worker"), 8);
  EXPECT_EQ(*num(*f, "active_threads_total"), 16);
  EXPECT_EQ(*num(*f, "worker_run_queue_delay_pct"), 300);
  EXPECT_EQ(*num(*f, "recommended_threads_per_worker"), 1);
  EXPECT_NE(f->fix.find("torch.set_num_threads(1)"), std::string::npos);
  EXPECT_NE(f->fix.find("OMP_NUM_THREADS=1"), std::string::npos);
  // The root cause ranks above its symptom (slow_getitem sees the same slow fetch).
  EXPECT_EQ(Session::verdict(fs), "thread_oversubscription");
}

TEST(AnalyzeThreads, FlipsAtRunQueueDelay) {
  auto w = oversubscribed();
  w.runq = 99;
  EXPECT_EQ(find(threads_run(w), "thread_oversubscription"), nullptr);
  w.runq = 101;
  EXPECT_NE(find(threads_run(w), "thread_oversubscription"), nullptr);
}

TEST(AnalyzeThreads, FlipsAtActiveThreadsPerWorker) {
  auto w = oversubscribed();
  // 4 workers on 2 CPUs: the total (>= 3) is met either way; the per-worker mean decides.
  Session s;
  s.set_facts(facts(2));
  Loader l;
  l.num_workers = 4;
  l.fetch_ms = 200;
  feed(s, l, kT0, 20);
  for (int64_t t = kT0, i = 0; t < kT0 + 20 * kS; t += 100 * kMs, ++i) {
    w.active_threads = i % 10 < 4 ? 2 : 1;  // mean 1.4
    pass(s, t, l, w);
  }
  EXPECT_EQ(find(s.findings(0, Window::kWholeRun), "thread_oversubscription"), nullptr);
  Session s2;
  s2.set_facts(facts(2));
  feed(s2, l, kT0, 20);
  for (int64_t t = kT0, i = 0; t < kT0 + 20 * kS; t += 100 * kMs, ++i) {
    w.active_threads = i % 10 < 6 ? 2 : 1;  // mean 1.6
    pass(s2, t, l, w);
  }
  EXPECT_NE(find(s2.findings(0, Window::kWholeRun), "thread_oversubscription"), nullptr);
}

TEST(AnalyzeThreads, APoolThatFitsTheCpusIsNotOversubscribed) {
  // One worker whose pool caps itself at the 2 CPUs: 2 active threads, under 1.5 x 2.
  auto w = oversubscribed();
  w.active_threads = 2;
  EXPECT_EQ(find(threads_run(w, 2, 2.0, 20, 1), "thread_oversubscription"), nullptr);
  w.active_threads = 4;  // 4 >= 3
  EXPECT_NE(find(threads_run(w, 2, 2.0, 20, 1), "thread_oversubscription"), nullptr);
}

TEST(AnalyzeThreads, ManySleepingThreadsAreNothing) {
  auto w = oversubscribed();
  w.num_threads = 64;  // a large pool...
  w.active_threads = 1;  // ...asleep
  w.runq = 300;
  EXPECT_EQ(find(threads_run(w), "thread_oversubscription"), nullptr);
}

TEST(AnalyzeThreads, PreemptionProvesItWhenRunQueueIsUnknown) {
  auto w = oversubscribed();
  w.runq = std::nullopt;
  w.ics = 999;
  EXPECT_EQ(find(threads_run(w), "thread_oversubscription"), nullptr);
  w.ics = 1001;
  EXPECT_NE(find(threads_run(w), "thread_oversubscription"), nullptr);
  w.ics = std::nullopt;  // nothing measured: never on counts alone
  EXPECT_EQ(find(threads_run(w), "thread_oversubscription"), nullptr);
}

TEST(AnalyzeThreads, KeepingUpIsQuietUnlessTheMainProcessQueues) {
  // fetch 100 ms / 2 workers = 50 ms per batch against a 60 ms step: no stall.
  EXPECT_EQ(find(threads_run(oversubscribed(), 2, 2.0, 60), "thread_oversubscription"), nullptr);
  auto fs = threads_run(oversubscribed(), 2, 21.0, 60);
  const report::Finding* f = find(fs, "thread_oversubscription");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, report::Severity::kWarning);
}

TEST(AnalyzeThreads, NamesPoolsAndTorchThreadsFromNotes) {
  Session s;
  s.set_facts(facts(2));
  Loader l;
  l.fetch_ms = 100;
  feed(s, l, kT0, 20);
  for (int64_t t = kT0; t < kT0 + 20 * kS; t += 100 * kMs) pass(s, t, l, oversubscribed());
  sample::ThreadPools p;
  p.libraries = {"OpenMP (libgomp)", "OpenCV"};
  p.env = {{"OMP_NUM_THREADS", "8"}};
  s.note_thread_pools(l.worker_pid(0), p);
  s.note_torch_threads(l.worker_pid(0), 8);
  const report::Finding* f = nullptr;
  auto fs = s.findings(0, Window::kWholeRun);
  f = find(fs, "thread_oversubscription");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*num(*f, "torch_threads"), 8);
  EXPECT_EQ(*text(*f, "thread_pools"), "OpenCV, OpenMP (libgomp)");
  EXPECT_EQ(*text(*f, "pool_env"), "OMP_NUM_THREADS=8");
  EXPECT_NE(f->fix.find("cv2.setNumThreads(1)"), std::string::npos);
  EXPECT_NE(f->fix.find("it is 8 in the workers"), std::string::npos);
}

// --- cow_memory_growth -----------------------------------------------------------------------

/// 20 s of a healthy 2-worker loader (25 batches/s per worker of `batch` samples) in 1 s
/// chunks, a smaps read of each worker after each second with Private_Dirty
/// base + bytes_per_sample x samples, and the dataset notes.
std::vector<report::Finding> cow_run(double bytes_per_sample, int batch, int reads = 20,
                                     std::optional<int64_t> available = int64_t(64) << 30,
                                     trace::StartMethod method = trace::StartMethod::kFork,
                                     std::optional<int64_t> length = 10'000'000) {
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
    s.ingest(event(trace::EventKind::kWorkerStart, l.worker_pid(w), kT0, l.id, w, -1, 0,
                   l.main_pid));
  DatasetNotes notes;
  notes.length = length;
  notes.attrs.push_back(DatasetAttr{"paths", "list", 3'000'000, 252 * kMiB, "str", true});
  notes.attrs.push_back(DatasetAttr{"labels", "numpy.ndarray", 3'000'000, 24 * kMiB, "int64", false});
  s.note_dataset(l.id, notes);
  int64_t samples = 0;  // per worker
  for (int k = 0; k < 20; ++k) {
    const int64_t t = kT0 + k * kS;
    feed(s, l, t, 1.0, false);
    samples += 25 * batch;
    std::vector<std::pair<int, int64_t>> pd;
    if (k >= 20 - reads)
      for (int w = 0; w < l.num_workers; ++w)
        pd.emplace_back(l.worker_pid(w), 10 * kMiB + int64_t(bytes_per_sample * double(samples)));
    pass(s, t + kS - 1, l, WorkerFigures{}, 2.0, pd, available);
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

TEST(AnalyzeCow, FlatMemoryIsNothing) {
  EXPECT_TRUE(cow_run(0, 32).empty());
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

// --- worker_startup_cost ---------------------------------------------------------------------

/// `epochs` epochs of 50 batches (fetch 10 ms, step 20 ms), each starting its workers for
/// `startup_s` before the first batch (only the first when persistent).
std::vector<report::Finding> startup_run(int epochs, double startup_s, bool persistent,
                                         trace::StartMethod method = trace::StartMethod::kSpawn,
                                         std::optional<int64_t> pickled = std::nullopt) {
  Session s;
  s.set_facts(facts(8));
  Loader l;
  l.jitter = 0;
  if (persistent) l.flags |= trace::kPersistentWorkers;
  if (pickled) {
    DatasetNotes n;
    n.pickled_bytes = pickled;
    s.note_dataset(l.id, n);
  }
  int64_t t = kT0;
  for (int e = 1; e <= epochs; ++e) {
    s.ingest(event(trace::EventKind::kIterStart, l.main_pid, t, l.id, l.num_workers,
                   l.prefetch_factor, uint32_t(l.batch_size), 0, l.main_pid, int64_t(method), e,
                   l.flags));
    const double up = (e == 1 || !persistent) ? startup_s : 0.0;
    int64_t at = t;
    for (int i = 0; i < 50; ++i) {
      const int64_t wait = i == 0 ? int64_t((up + 0.010) * kS) : int64_t(0.1 * kMs);
      const int64_t handed = at + wait;
      s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(i % 2), handed - 10 * kMs,
                     l.id, i % 2, i, uint32_t(l.batch_size), 10 * kMs, kMs, 9 * kMs, 1 << 20));
      s.ingest(event(trace::EventKind::kMainBatch, l.main_pid, at, l.id, i % 2, i, 0, wait,
                     i == 0 ? -1 : 20 * kMs, -1));
      at = handed + 20 * kMs;
    }
    s.ingest(event(trace::EventKind::kIterEnd, l.main_pid, at, l.id, -1, 50, 0, 0, e));
    t = at;
  }
  return s.findings(0, Window::kWholeRun);
}

TEST(AnalyzeStartup, RestartsEveryEpochAreNamed) {
  auto fs = startup_run(4, 2.0, false);
  const report::Finding* f = find(fs, "worker_startup_cost");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, report::Severity::kCritical);
  EXPECT_EQ(*num(*f, "restarts"), 3);
  EXPECT_NEAR(*num(*f, "startup_s_per_restart"), 2.0, 1e-6);
  EXPECT_EQ(*text(*f, "start_method"), "spawn");
  EXPECT_NE(f->fix.find("persistent_workers=True"), std::string::npos);
  EXPECT_NE(text(*f, "first_batch_latency_ms_each")->find("2: 2010"), std::string::npos)
      << *text(*f, "first_batch_latency_ms_each");
}

TEST(AnalyzeStartup, FlipsAtShareOfTheEpochs) {
  // Wall per epoch = startup + 0.01 + 49 x 0.0201 + 0.02 ~ startup + 1.015 s; 3 of 4 restart.
  // share = 3x / (4 (x + 1.015)): 0.10 at x = 0.156, 0.25 at x = 0.508.
  EXPECT_EQ(find(startup_run(4, 0.14, false), "worker_startup_cost"), nullptr);
  auto warn = startup_run(4, 0.17, false);
  ASSERT_NE(find(warn, "worker_startup_cost"), nullptr);
  EXPECT_EQ(find(warn, "worker_startup_cost")->severity, report::Severity::kWarning);
  EXPECT_EQ(find(startup_run(4, 0.48, false), "worker_startup_cost")->severity,
            report::Severity::kWarning);
  EXPECT_EQ(find(startup_run(4, 0.54, false), "worker_startup_cost")->severity,
            report::Severity::kCritical);
}

TEST(AnalyzeStartup, PersistentWorkersPayOnce) {
  EXPECT_EQ(find(startup_run(4, 2.0, true), "worker_startup_cost"), nullptr);
  // A heavy dataset under spawn makes the one start-up worth an informational note.
  auto fs = startup_run(4, 2.0, true, trace::StartMethod::kSpawn, 100 * kMiB);
  const report::Finding* f = find(fs, "worker_startup_cost");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, report::Severity::kInfo);
  EXPECT_EQ(*num(*f, "pickled_dataset_mib"), 100);
  EXPECT_EQ(*num(*f, "pickled_per_start_mib"), 200);
  // Under fork nothing is pickled: no note.
  EXPECT_EQ(find(startup_run(4, 2.0, true, trace::StartMethod::kFork, 100 * kMiB),
                 "worker_startup_cost"),
            nullptr);
}

TEST(AnalyzeStartup, HeavyPickleIsInTheFix) {
  auto fs = startup_run(4, 2.0, false, trace::StartMethod::kSpawn, 100 * kMiB);
  const report::Finding* f = find(fs, "worker_startup_cost");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->fix.find("lighter"), std::string::npos);
  EXPECT_NE(f->fix.find("100 MiB"), std::string::npos);
}

// --- straggler_worker -----------------------------------------------------------------------

/// 2 workers, batches of 8 ms, the loop steps 20 ms; every 12th batch is slow: its fetch
/// ends `slow_wait_ms` - 1 after the loop asks for it, while the next batch is already done.
std::vector<report::Finding> straggler_run(double slow_wait_ms, bool in_order = true,
                                           bool notes = false) {
  Session s;
  s.set_facts(facts(8));
  Loader l;
  if (!in_order) l.flags &= uint8_t(~trace::kInOrder);
  s.ingest(event(trace::EventKind::kIterStart, l.main_pid, kT0, l.id, 2, 2, 4, 0, l.main_pid,
                 int64_t(trace::StartMethod::kFork), 1, l.flags));
  int64_t t = kT0 + kS;
  for (int i = 0; i < 1200; ++i) {
    const bool slow = i % 12 == 5 && slow_wait_ms > 0;
    const int w = i % 2;
    int64_t wait = int64_t(0.05 * kMs);
    if (slow) {
      const int64_t own_end = t + int64_t((slow_wait_ms - 1) * kMs);
      const int64_t fetch = own_end - (t - 50 * kMs);
      // The next batch (other worker) finished before the loop asked for this one.
      s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(1 - w), t - 9 * kMs, l.id,
                     1 - w, i + 1, 4, 8 * kMs, kMs, 7 * kMs, 64));
      s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(w), own_end - fetch, l.id, w,
                     i, 4, fetch, kMs, kMs, 64));
      if (notes)
        s.note_slow_batch(l.id, SlowBatchNote{l.worker_pid(w), w, i, fetch,
                                              {i * 4LL, i * 4LL + 1, i * 4LL + 2, i * 4LL + 3}});
      wait = int64_t(slow_wait_ms * kMs);
    } else if (i % 12 != 6) {  // batch 6 of a cycle was fed with the slow one
      s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(w), t - 9 * kMs, l.id, w, i,
                     4, 8 * kMs, kMs, 7 * kMs, 64));
    }
    s.ingest(event(trace::EventKind::kMainBatch, l.main_pid, t, l.id, w, i, 0, wait,
                   i == 0 ? -1 : 20 * kMs, -1));
    t += wait + 20 * kMs;
  }
  return s.findings(0, Window::kWholeRun);
}

TEST(AnalyzeStraggler, SlowBatchesBlockingTheLoopAreCritical) {
  auto fs = straggler_run(150, true, true);
  const report::Finding* f = find(fs, "straggler_worker");
  ASSERT_NE(f, nullptr) << (fs.empty() ? "none" : ids(fs)[0]);
  EXPECT_EQ(f->severity, report::Severity::kCritical);
  EXPECT_EQ(Session::verdict(fs), "straggler_worker");
  // 100 slow batches each blocked 149 ms behind a finished one.
  EXPECT_NEAR(*num(*f, "head_of_line_wait_s"), 100 * 0.149, 1e-6);
  EXPECT_EQ(*num(*f, "head_of_line_batches"), 100);
  EXPECT_NE(f->fix.find("in_order=False"), std::string::npos);
  // The newest 64 notes are kept (slow batches 437, 449, ... 1193), their samples in order.
  EXPECT_EQ(text(*f, "slow_sample_indices")->rfind("1748, 1749, 1750, 1751, 1796, ", 0), 0u)
      << *text(*f, "slow_sample_indices");
  EXPECT_NE(text(*f, "batch_ms_per_worker")->find("worker 1"), std::string::npos);
}

TEST(AnalyzeStraggler, FlipsAtHeadOfLineShareOfTheLoop) {
  // Per 12 batches: 12 x 20 ms of steps, 11 x 0.05 + W ms of waits, W - 1 of it blocked.
  // (W - 1) / (240.55 + W) = 0.05 at W = 13.71 ms.
  EXPECT_EQ(find(straggler_run(13.2), "straggler_worker"), nullptr);
  EXPECT_NE(find(straggler_run(14.5), "straggler_worker"), nullptr);
}

TEST(AnalyzeStraggler, OutOfOrderOrUniformIsNothing) {
  EXPECT_EQ(find(straggler_run(150, false), "straggler_worker"), nullptr);
  EXPECT_TRUE(straggler_run(0).empty());
}

TEST(AnalyzeStraggler, ATransitWaitIsNotHeadOfLine) {
  // The loop waits 5 ms for a batch whose fetch ended before it asked (the queue hand-off):
  // a later batch being done then says nothing about a straggler.
  Session s;
  s.set_facts(facts(8));
  Loader l;
  s.ingest(event(trace::EventKind::kIterStart, l.main_pid, kT0, l.id, 2, 2, 4, 0, l.main_pid,
                 int64_t(trace::StartMethod::kFork), 1, l.flags));
  int64_t t = kT0 + kS;
  for (int i = 0; i < 400; ++i) {
    s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(i % 2), t - 9 * kMs, l.id, i % 2,
                   i, 4, 8 * kMs, kMs, 7 * kMs, 64));
    s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(1 - i % 2), t - 9 * kMs, l.id,
                   1 - i % 2, i + 1000, 4, 8 * kMs, kMs, 7 * kMs, 64));
    s.ingest(event(trace::EventKind::kMainBatch, l.main_pid, t, l.id, i % 2, i, 0, 5 * kMs,
                   i == 0 ? -1 : 20 * kMs, -1));
    t += 25 * kMs;
  }
  auto v = s.view(0, Window::kWholeRun);
  ASSERT_EQ(v.loaders.size(), 1u);
  EXPECT_EQ(*v.loaders[0].head_of_line_s, 0);
}

// --- the readers behind them -----------------------------------------------------------------

TEST(ThreadPools, LibrariesFromMaps) {
  const std::string maps =
      "7f00-7f01 r-xp 00000000 08:01 1 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
      "7f01-7f02 r-xp 00000000 08:01 2 /site-packages/torch/lib/libgomp-a34b3233.so.1\n"
      "7f02-7f03 r-xp 00000000 08:01 3 /site-packages/numpy.libs/libscipy_openblas64_-ff651d7f.so\n"
      "7f03-7f04 r-xp 00000000 08:01 4 /site-packages/torch/lib/libgomp-a34b3233.so.1\n"
      "7f04-7f05 r-xp 00000000 08:01 5 /site-packages/cv2/cv2.abi3.so\n"
      "7f05-7f06 rw-p 00000000 00:00 0 [heap]\n"
      "7f06-7f07 r-xp 00000000 08:01 6 /opt/intel/lib/libiomp5.so\n"
      "7f07-7f08 r-xp 00000000 08:01 7 /opt/intel/lib/libmkl_core.so.2\n";
  EXPECT_EQ(sample::parse_pool_libraries(maps),
            (std::vector<std::string>{"OpenMP (libgomp)", "OpenBLAS", "OpenCV",
                                      "OpenMP (Intel libiomp5)", "MKL"}));
  EXPECT_TRUE(sample::parse_pool_libraries("").empty());
}

TEST(ThreadPools, SizingVariablesFromEnviron) {
  const std::string env("PATH=/bin\0OPENBLAS_NUM_THREADS=64\0OMP_NUM_THREADS=8\0HOME=/root\0", 62);
  auto vars = sample::parse_pool_env(env);
  ASSERT_EQ(vars.size(), 2u);
  EXPECT_EQ(vars[0], (std::pair<std::string, std::string>{"OMP_NUM_THREADS", "8"}));
  EXPECT_EQ(vars[1], (std::pair<std::string, std::string>{"OPENBLAS_NUM_THREADS", "64"}));
}

TEST(ThreadPools, ReadsThisProcess) {
  auto p = sample::read_thread_pools(getpid());
  EXPECT_TRUE(p.maps_read);
  EXPECT_TRUE(p.environ_read);
  auto gone = sample::read_thread_pools(0x3fffffff);
  EXPECT_FALSE(gone.maps_read);
}

TEST(SampleActiveThreads, SpinningThreadsCountSleepingOnesDoNot) {
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  bool spin = true;
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i)
    ts.emplace_back([&] {
      for (;;) {
        {
          std::unique_lock lock(mu);
          cv.wait(lock, [&] { return spin || stop.load(); });
          if (stop) return;
        }
        auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(5);
        while (std::chrono::steady_clock::now() < until) {
        }
      }
    });
  sample::Sampler sampler(getpid(), sample::SamplerOptions{});
  sampler.sample_once();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto busy = sampler.sample_once();
  {
    std::lock_guard lock(mu);
    spin = false;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  sampler.sample_once();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto idle = sampler.sample_once();
  stop = true;
  cv.notify_all();
  for (auto& t : ts) t.join();
  ASSERT_FALSE(busy.processes.empty());
  ASSERT_TRUE(busy.processes[0].active_threads);
  EXPECT_GE(*busy.processes[0].active_threads, 3);
  ASSERT_TRUE(idle.processes[0].active_threads);
  EXPECT_LE(*idle.processes[0].active_threads, 1);  // at most this (sampling) thread
}

}  // namespace
}  // namespace dldoctor::analyze
