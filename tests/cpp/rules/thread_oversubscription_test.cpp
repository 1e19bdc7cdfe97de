// thread_oversubscription at the edges of its thresholds: busy threads per worker and per
// CPU, their run-queue delay (or preemption), the main process queueing; the pools and
// variables named from the notes.
#include "dldoctor_core/analyze/rules/thread_oversubscription.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

/// A stalled 2-worker loader (fetch 100 ms, step 20 ms: 60% stall) with these worker figures.
std::vector<report::Finding> threads_run(const WorkerFigures& w, double usable = 2,
                                         std::optional<double> main_runq = 2.0, double step_ms = 20,
                                         int workers = 2) {
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

WorkerFigures busy_pools() {
  WorkerFigures w;
  w.num_threads = 10;
  w.active_threads = 8;
  w.runq = 300;
  w.ics = 5000;
  w.cpu = 90;
  return w;
}

TEST(AnalyzeThreads, PoolsQueueingIsCriticalWithTheCapAndPools) {
  auto fs = threads_run(busy_pools());
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
  auto w = busy_pools();
  w.runq = 99;
  EXPECT_EQ(find(threads_run(w), "thread_oversubscription"), nullptr);
  w.runq = 101;
  EXPECT_NE(find(threads_run(w), "thread_oversubscription"), nullptr);
}

TEST(AnalyzeThreads, FlipsAtActiveThreadsPerWorker) {
  auto w = busy_pools();
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
  auto w = busy_pools();
  w.active_threads = 2;
  EXPECT_EQ(find(threads_run(w, 2, 2.0, 20, 1), "thread_oversubscription"), nullptr);
  w.active_threads = 4;  // 4 >= 3
  EXPECT_NE(find(threads_run(w, 2, 2.0, 20, 1), "thread_oversubscription"), nullptr);
}

TEST(AnalyzeThreads, ManySleepingThreadsAreNothing) {
  auto w = busy_pools();
  w.num_threads = 64;    // a large pool...
  w.active_threads = 1;  // ...asleep
  w.runq = 300;
  EXPECT_EQ(find(threads_run(w), "thread_oversubscription"), nullptr);
}

TEST(AnalyzeThreads, PreemptionProvesItWhenRunQueueIsUnknown) {
  auto w = busy_pools();
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
  EXPECT_EQ(find(threads_run(busy_pools(), 2, 2.0, 60), "thread_oversubscription"), nullptr);
  auto fs = threads_run(busy_pools(), 2, 21.0, 60);
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
  for (int64_t t = kT0; t < kT0 + 20 * kS; t += 100 * kMs) pass(s, t, l, busy_pools());
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

}  // namespace
}  // namespace dldoctor::analyze
