// The Session as a stream: the recent window names a steady bottleneck within 15 s and
// forgets it when it goes, the whole run remembers; loader summaries, the data-stall gate
// every rule starts from, healthy loaders and unknown figures, the failure log;
// bounded state under a long fast stream, and ingest racing findings().
#include <gtest/gtest.h>

#include <atomic>
#include <csignal>
#include <thread>

#include "analyze_sim.hpp"
#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

Loader slow_getitem_loader() {
  Loader l;
  l.num_workers = 2;
  l.fetch_ms = 100;
  l.on_cpu = 0.95;
  l.step_ms = 20;
  return l;
}

TEST(AnalyzeStreaming, SteadyBottleneckIsNamedWithin15Seconds) {
  Session s;
  s.set_facts(facts(8));
  Loader l = slow_getitem_loader();
  // Events and passes arrive second by second, as from the drain and sampler threads.
  std::string named_at;
  for (int sec = 0; sec < 15; ++sec) {
    feed(s, l, kT0 + sec * kS, 1, sec == 0);
    feed_passes(s, kT0 + sec * kS, 1, procs(l, 30.0, 95.0, 1.0, 3.0));
    if (named_at.empty() &&
        Session::verdict(s.findings(kT0 + (sec + 1) * kS, Window::kRecent)) == "slow_getitem")
      named_at = std::to_string(sec + 1);
  }
  EXPECT_FALSE(named_at.empty());
  auto fs = s.findings(kT0 + 15 * kS, Window::kRecent);
  ASSERT_FALSE(fs.empty());
  EXPECT_EQ(fs[0].id, "slow_getitem");
  EXPECT_EQ(*num(fs[0], "recommended_num_workers"), 6);
  // now_ns = 0 means "the newest time seen".
  EXPECT_EQ(Session::verdict(s.findings(0, Window::kRecent)), "slow_getitem");
}

TEST(AnalyzeStreaming, RecentWindowForgetsAFixedBottleneckTheWholeRunDoesNot) {
  Session s;
  s.set_facts(facts(8));
  Loader l = slow_getitem_loader();
  int64_t t = feed(s, l, kT0, 15);
  feed_passes(s, kT0, 15, procs(l, 30.0, 95.0, 1.0, 3.0));
  // The consumer slows down (say, a bigger model): the same loader now keeps up.
  Loader later = l;
  later.step_ms = 200;
  const int64_t t1 = t + 1 * kS;
  t = feed(s, later, t1, 15, false);
  feed_passes(s, t1, 15, procs(later, 30.0, 45.0, 1.0, 3.0));
  EXPECT_EQ(Session::verdict(s.findings(t, Window::kRecent)), "healthy");
  auto whole = s.findings(t, Window::kWholeRun);
  EXPECT_EQ(Session::verdict(whole), "slow_getitem");
}

TEST(AnalyzeStreaming, RecentWindowCoversTheLastTenSeconds) {
  Session s;
  s.set_facts(facts(8));
  Loader l = slow_getitem_loader();
  feed(s, l, kT0, 30);
  const JobView v = s.view(kT0 + 30 * kS, Window::kRecent);
  ASSERT_EQ(v.loaders.size(), 1u);
  // 20 batches/s for 10 s (give or take the seconds at the window's edges).
  EXPECT_NEAR(double(v.loaders[0].batches), 200, 25);
  EXPECT_NEAR(*v.loaders[0].data_stall_fraction, 0.6, 1e-6);
  const JobView w = s.view(0, Window::kWholeRun);
  EXPECT_NEAR(double(w.loaders[0].batches), 600, 5);
}

TEST(AnalyzeStreaming, AnIdleLoaderDropsOutOfTheRecentWindow) {
  Session s;
  s.set_facts(facts(8));
  Loader val = slow_getitem_loader();
  val.id = 1;
  val.worker_pid0 = 3000;
  feed(s, val, kT0, 5);
  Loader train;
  const int64_t t = feed(s, train, kT0 + 6 * kS, 20);
  const JobView v = s.view(t, Window::kRecent);
  ASSERT_EQ(v.loaders.size(), 1u);
  EXPECT_EQ(v.loaders[0].loader, 0);
  EXPECT_TRUE(s.findings(t, Window::kRecent).empty());
  EXPECT_EQ(s.view(t, Window::kWholeRun).loaders.size(), 2u);
}

TEST(AnalyzeSession, LoaderSummaryCarriesConfigWorkersAndEpochs) {
  Session s;
  s.set_facts(facts(8));
  Loader l = slow_getitem_loader();
  l.flags = trace::kPinMemory | trace::kPersistentWorkers | trace::kInOrder;
  feed(s, l, kT0, 5);
  s.ingest(event(trace::EventKind::kIterEnd, l.main_pid, kT0 + 5 * kS, 0, -1, -1, 0, 0));
  l.fetch_ms = 250;  // the second epoch's first batch takes longer
  feed(s, l, kT0 + 6 * kS, 5);
  feed_passes(s, kT0, 11, procs(l, 30.0, 95.0, 2.0, 3.0, 1e6, 2e6));
  auto sums = s.loaders();
  ASSERT_EQ(sums.size(), 1u);
  const LoaderSummary& x = sums[0];
  EXPECT_EQ(x.id, 0);
  EXPECT_TRUE(x.config.known);
  EXPECT_EQ(x.config.num_workers, 2);
  EXPECT_EQ(*x.config.batch_size, 32);
  EXPECT_EQ(*x.config.prefetch_factor, 2);
  EXPECT_TRUE(x.config.pin_memory());
  EXPECT_TRUE(x.config.persistent_workers());
  EXPECT_EQ(x.config.main_pid, 1000);
  EXPECT_EQ(x.config.start_method, trace::StartMethod::kFork);
  EXPECT_EQ(x.epochs, 2);
  EXPECT_GT(x.batches, 100);
  ASSERT_EQ(x.first_batch_latency_ms_per_epoch.size(), 2u);
  EXPECT_NEAR(x.first_batch_latency_ms_per_epoch[0], 100, 1e-6);
  EXPECT_NEAR(x.first_batch_latency_ms_per_epoch[1], 250, 1e-6);
  EXPECT_NEAR(*x.first_batch_latency_ms, 100, 1e-6);
  EXPECT_EQ(x.worker_pids, (std::vector<int>{2000, 2001}));
  ASSERT_EQ(x.workers.size(), 2u);
  EXPECT_EQ(x.workers[0].worker, 0);
  EXPECT_EQ(x.workers[0].pid, 2000);
  EXPECT_GT(x.workers[0].batches, 40);
  EXPECT_TRUE(x.workers[0].fetch_mean_ms);
  EXPECT_TRUE(x.workers[1].fetch_recent_p50_ms);
  EXPECT_NEAR(*x.worker_cpu_pct, 95, 1e-9);
  EXPECT_NEAR(*x.runq_delay_pct, 2, 1e-9);
  EXPECT_NEAR(*x.read_mb_per_s, 2, 1e-6);  // 2 workers x 1 MB/s
  EXPECT_TRUE(x.data_stall_pct);
  EXPECT_TRUE(x.batches_per_s);
  EXPECT_TRUE(x.getitem_p50_ms && x.getitem_p99_ms && x.collate_p50_ms);
  EXPECT_FALSE(x.pin_memory_ms);  // the events said n/a
}

TEST(AnalyzeSession, UnknownConfigInfersWorkersFromEvents) {
  Session t;  // worker batches without the iterator's and workers' start events
  for (int i = 0; i < 30; ++i)
    t.ingest(event(trace::EventKind::kWorkerBatch, 2000 + i % 3, kT0 + i * 10 * kMs, 0, i % 3, i,
                   32, 10 * kMs, kMs, 9 * kMs, -1));
  auto sums = t.loaders();
  ASSERT_EQ(sums.size(), 1u);
  EXPECT_FALSE(sums[0].config.known);
  EXPECT_EQ(sums[0].config.num_workers, 3);
  EXPECT_EQ(*t.view(0, Window::kWholeRun).total_workers, 3);
}

TEST(AnalyzeSession, DeadWorkersStopCounting) {
  Session s;
  Loader l = slow_getitem_loader();
  l.num_workers = 4;
  feed(s, l, kT0, 2);
  for (int w = 0; w < 4; ++w)
    s.ingest(event(trace::EventKind::kWorkerDied, l.main_pid, kT0 + 2 * kS, 0, w, -1, 0, 0, 9));
  // A new epoch with fresh workers: never more than 4 at once.
  Loader next = l;
  next.worker_pid0 = 5000;
  feed(s, next, kT0 + 3 * kS, 2);
  EXPECT_EQ(*s.view(0, Window::kWholeRun).total_workers, 4);
  EXPECT_EQ(s.loaders()[0].worker_deaths, 4);
}

TEST(AnalyzeSession, HotFunctionsAddUpOverProfilesAndSortHottestFirst) {
  Session s;
  s.add_hot_functions(0, {{"a", "x.py:1", 10, 4.0, 1}, {"b", "x.py:2", 20, std::nullopt, 2}});
  s.add_hot_functions(0, {{"a", "x.py:1", 50, 6.0, 5}, {"a", "y.py:1", 1, std::nullopt, 1}});
  Loader l = slow_getitem_loader();
  feed(s, l, kT0, 2);
  const JobView v = s.view(0, Window::kWholeRun);
  const auto& hot = v.loaders.at(0).hot_functions;
  ASSERT_EQ(hot.size(), 3u);
  EXPECT_EQ(hot[0].name, "a");
  EXPECT_EQ(hot[0].location, "x.py:1");
  EXPECT_EQ(hot[0].cumulative_ms, 60);
  EXPECT_EQ(*hot[0].self_ms, 10);
  EXPECT_EQ(hot[0].calls, 6);
  EXPECT_EQ(hot[1].name, "b");
}

TEST(AnalyzeSession, ProfiledFetchesCountButAreNotTimed) {
  Session s;
  for (int i = 0; i < 10; ++i) {
    const bool profiled = i == 3;
    s.ingest(event(trace::EventKind::kWorkerBatch, 2000, kT0 + i * 100 * kMs, 1, 0, i, 32,
                   (profiled ? 200 : 10) * kMs, kMs, 9 * kMs, -1, profiled ? kProfiledFetch : 0));
  }
  const JobView v = s.view(0, Window::kWholeRun);
  ASSERT_EQ(v.loaders.size(), 1u);
  EXPECT_EQ(v.loaders[0].worker_batches, 10);
  EXPECT_NEAR(*v.loaders[0].fetch_mean_s, 0.010, 1e-9);
  const auto sums = s.loaders();
  EXPECT_EQ(sums[0].workers.at(0).batches, 10);
  EXPECT_NEAR(*sums[0].workers[0].fetch_mean_ms, 10, 1e-9);
}

TEST(AnalyzeSession, WorkerDiedNamesThePid) {
  Session s;
  Loader l = slow_getitem_loader();
  feed(s, l, kT0, 2);  // epoch 1: workers 0 and 1 are pids 2000 and 2001
  s.ingest(event(trace::EventKind::kWorkerExit, 2000, kT0 + 2 * kS, 0, 0, -1, 0, 0));
  Loader next = l;
  next.worker_pid0 = 5000;  // epoch 2: the same worker ids, new pids
  feed(s, next, kT0 + 3 * kS, 20);
  // The death of epoch 1's worker 1 is seen late; its pid says which process it was.
  s.ingest(
      event(trace::EventKind::kWorkerDied, l.main_pid, kT0 + 3500 * kMs, 0, 1, -1, 0, -1, 9, 2001));
  const JobView v = s.view(kT0 + 23 * kS, Window::kRecent);
  EXPECT_EQ(*v.total_workers, 2);
  EXPECT_EQ(v.loaders.at(0).worker_pids, (std::vector<int>{5000, 5001}));
}

TEST(AnalyzeSession, LongFastStreamKeepsBoundedStateAndExactTotals) {
  Session s;
  s.set_facts(facts(2));
  Loader l;
  l.num_workers = 1;
  l.fetch_ms = 0.2;
  l.collate_ms = 0.05;
  l.step_ms = 0.1;                          // 5,000 batches/s, the tiny-batch worst case
  const int64_t end = feed(s, l, kT0, 40);  // 200,000 batches
  const auto sums = s.loaders();
  EXPECT_NEAR(double(sums[0].batches), 200000, 10);
  EXPECT_NEAR(*sums[0].data_stall_pct, 50, 0.5);
  const JobView v = s.view(end, Window::kRecent);
  EXPECT_NEAR(double(v.loaders[0].batches), 52500, 3000);  // 10 to 11 whole seconds
  EXPECT_NEAR(*v.loaders[0].getitem_p50_ms, 0.15 / 32, 1e-3);
  EXPECT_NEAR(double(s.events()), 400002, 20);
}

TEST(AnalyzeSession, IngestRacesFindings) {
  Session s;
  s.set_facts(facts(8));
  Loader l = slow_getitem_loader();
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      auto fs = s.findings(0, Window::kRecent);
      (void)Session::verdict(fs);
      (void)s.loaders();
    }
  });
  for (int sec = 0; sec < 20; ++sec) {
    feed(s, l, kT0 + sec * kS, 1, sec == 0);
    feed_passes(s, kT0 + sec * kS, 1, procs(l, 30.0, 95.0, 1.0, 3.0));
  }
  done = true;
  reader.join();
  EXPECT_EQ(Session::verdict(s.findings(0, Window::kWholeRun)), "slow_getitem");
}

// --- the data-stall gate, healthy loaders, unknown figures --------------------------------

TEST(AnalyzeHealthy, FastLoaderGivesNoFindings) {
  Loader l;  // 2 workers x 10 ms per batch supply 200 batches/s; the loop wants 50
  auto r = run(l, procs(l, 40.0, 5.0, 1.0, 2.0), 8);
  EXPECT_TRUE(r->whole.empty()) << ids(r->whole).front();
  EXPECT_TRUE(r->recent.empty());
  EXPECT_EQ(Session::verdict(r->whole), "healthy");
}

TEST(AnalyzeHealthy, SlowSleepingConsumerGivesNoFindings) {
  Loader l;
  l.step_ms = 500;  // e.g. time.sleep or waiting on a GPU
  auto r = run(l, procs(l, 1.0, 1.0, 0.5, 1.0), 8);
  EXPECT_TRUE(r->whole.empty());
  EXPECT_EQ(Session::verdict(r->whole), "healthy");
}

TEST(AnalyzeStall, FlipsAtFivePercent) {
  Loader l;
  l.num_workers = 1;
  l.fetch_ms = 100;  // 10 batches/s; the wait per batch is fetch - step
  l.jitter = 0;
  l.step_ms = 95.1;  // wait 4.9 ms: 4.9 % of the loop
  auto below = run(l, procs(l, 30.0, 95.0, 1.0, 2.0), 2);
  EXPECT_TRUE(below->whole.empty()) << ids(below->whole).front();
  l.step_ms = 94.9;  // wait 5.1 ms: 5.1 %
  auto above = run(l, procs(l, 30.0, 95.0, 1.0, 2.0), 2);
  ASSERT_FALSE(above->whole.empty());
  EXPECT_EQ(above->whole[0].id, "slow_getitem");
  EXPECT_NEAR(*num(above->whole[0], "data_stall_fraction"), 0.051, 1e-6);
}

TEST(AnalyzeStall, TooFewBatchesAreNotJudged) {
  Session s;
  s.set_facts(facts(8));
  Loader l;
  l.num_workers = 1;
  l.fetch_ms = 1000;
  l.step_ms = 10;
  feed(s, l, kT0, 4.5);  // 5 batches: the first plus 4 with a step
  EXPECT_TRUE(s.findings(0, Window::kWholeRun).empty());
  feed(s, l, kT0 + 5 * kS, 1.5, false);
  EXPECT_EQ(Session::verdict(s.findings(0, Window::kWholeRun)), "slow_getitem");
}

TEST(AnalyzeStall, FlipsAtMinimumLoopTime) {
  Loader l;
  l.num_workers = 1;
  l.fetch_ms = 100;
  l.step_ms = 20;  // wait 80 ms: every stepped batch is 100 ms of loop
  l.jitter = 0;
  for (auto [seconds, verdict] : {std::pair{2.0, "healthy"}, std::pair{2.2, "slow_getitem"}}) {
    Session s;  // 19 stepped batches (1.9 s of loop), then 21 (2.1 s)
    s.set_facts(facts(8));
    feed(s, l, kT0, seconds);
    EXPECT_EQ(Session::verdict(s.findings(0, Window::kRecent)), verdict) << seconds;
  }
}

TEST(AnalyzeUnknowns, NoSamplerAtAllStillDiagnosesFromEvents) {
  Loader l = cpu_bound();
  auto r = run(l, {}, 8);
  ASSERT_EQ(Session::verdict(r->whole), "slow_getitem");
  EXPECT_EQ(*num(r->whole[0], "recommended_num_workers"), 6);
  Loader w = waiting();
  EXPECT_EQ(Session::verdict(run(w, {}, 2)->whole), "io_bound");
}

TEST(AnalyzeUnknowns, UnknownCpuTimeLowersConfidence) {
  Loader l = cpu_bound();
  l.on_cpu.reset();
  auto r = run(l, procs(l, std::nullopt, std::nullopt), 8);
  ASSERT_EQ(r->whole.size(), 1u);
  EXPECT_EQ(r->whole[0].id, "slow_getitem");
  EXPECT_EQ(r->whole[0].severity, report::Severity::kWarning);
  EXPECT_EQ(*text(r->whole[0], "worker_on_cpu_fraction"), "unknown");
  EXPECT_EQ(Session::verdict(r->whole), "healthy");  // no critical: nothing proven
}

TEST(AnalyzeUnknowns, SamplerCpuStandsInForEventCpu) {
  Loader l = waiting();
  l.on_cpu.reset();
  auto r = run(l, procs(l, 30.0, 8.0, 0.5), 2);
  EXPECT_EQ(Session::verdict(r->whole), "io_bound");
}

TEST(AnalyzeUnknowns, EmptyFactsAndEmptyPassesNeverCrash) {
  Loader l = oversubscribed(0.6);
  Session s;
  feed(s, l, kT0, 20);
  sample::Snapshot empty;
  empty.t_ns = kT0 + kS;
  s.ingest(empty);
  feed_passes(s, kT0, 20, procs(l, std::nullopt, std::nullopt));
  auto fs = s.findings(0, Window::kWholeRun);
  EXPECT_EQ(find(fs, "too_many_workers"), nullptr);  // usable CPUs unknown
  const report::Finding* g = find(fs, "slow_getitem");
  ASSERT_NE(g, nullptr);
  EXPECT_FALSE(num(*g, "recommended_num_workers"));
  EXPECT_FALSE(s.loaders().empty());
  // Off-CPU workers with nothing to tell waiting from queueing: io_bound, but only a warning.
  Session t;
  Loader w = oversubscribed(0.3);
  feed(t, w, kT0, 20);
  const auto tf = t.findings(0, Window::kWholeRun);
  const report::Finding* io = find(tf, "io_bound");
  ASSERT_NE(io, nullptr);
  EXPECT_EQ(io->severity, report::Severity::kWarning);
}

TEST(AnalyzeUnknowns, NoEventsNoFindings) {
  Session s;
  EXPECT_TRUE(s.findings(0, Window::kWholeRun).empty());
  EXPECT_TRUE(s.findings(0, Window::kRecent).empty());
  EXPECT_TRUE(s.loaders().empty());
  feed_passes(s, kT0, 1, {Proc{1, 0, 50.0}});
  EXPECT_TRUE(s.findings(0, Window::kRecent).empty());
}

TEST(FailureText, TheLineThatNamesTheCause) {
  const std::string reraised =
      "Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback (most recent "
      "call last):\n  File \"worker.py\", line 374, in _worker_loop\n    data = "
      "fetcher.fetch(index)\nRuntimeError: unable to allocate shared memory(shm) for file "
      "</torch_1_2_0>: No space left on device (28)\n";
  EXPECT_EQ(error_line(reraised, ErrorKind::kShmNoSpace),
            "RuntimeError: unable to allocate shared memory(shm) for file </torch_1_2_0>: No "
            "space left on device (28)");
  EXPECT_EQ(error_line("first\n\n  last line  \n", ErrorKind::kOther), "last line");
  EXPECT_EQ(bytes_text(24.0 * kMiB), "24 MiB");
  EXPECT_EQ(bytes_text(1.5 * kGiB), "1.5 GiB");
  EXPECT_EQ(bytes_text(512), "512 B");
}

TEST(FailureLog, DeathsMergeByPidAndErrorsFoldByText) {
  FailureLog log;
  log.on_death_event(died(0, 2000, -1, SIGKILL));
  WorkerDeath d;
  d.loader = 0;
  d.worker = 0;
  d.pid = 2000;
  d.message = "killed";
  d.t_ns = kT0 + 6 * kS;
  log.note(d);
  WorkerDeath other = d;
  other.pid = 2001;
  log.note(other);
  for (int i = 0; i < 3; ++i) log.note(error("Too many open files", ErrorSource::kQueueFeeder));
  FailureView v = log.view(-1, 0);
  ASSERT_EQ(v.deaths.size(), 2u);
  EXPECT_EQ(*v.deaths[0].signal, SIGKILL);
  EXPECT_EQ(v.deaths[0].message, "killed");
  ASSERT_EQ(v.errors.size(), 1u);
  EXPECT_EQ(v.errors[0].count, 3);
  // The recent window leaves out what happened before it.
  EXPECT_TRUE(log.view(kT0 + 100 * kS, kT0 + 110 * kS).deaths.empty());
}

TEST(FailureLog, StaysBounded) {
  FailureLog log;
  for (int i = 0; i < 1000; ++i) {
    log.on_death_event(died(i % 4, 3000 + i, 1, 0));
    log.note(error("error " + std::to_string(i)));
  }
  FailureView v = log.view(-1, 0);
  EXPECT_EQ(v.deaths.size(), FailureLog::kMaxDeaths);
  EXPECT_EQ(v.errors.size(), FailureLog::kMaxErrors);
}

// A multi-rank job's findings name the rank and its own loader number, not the job-wide id;
// a job without ranks keeps its titles as they are.
TEST(AnalyzeRanks, FindingsAboutARankLoaderAreLabelledWithTheRank) {
  Session s;
  s.note_rank(1, RankId{0, 0, 2, std::nullopt, std::nullopt});
  s.note_rank(2, RankId{1, 1, 2, std::nullopt, std::nullopt});
  s.note_rank(3, RankId{1, 1, 2, std::nullopt, std::nullopt});  // rank 1's second loader
  std::vector<report::Finding> fs(5);
  fs[0].loader = 2, fs[0].title = "Loader 2: __getitem__ is too slow";
  fs[1].loader = 3, fs[1].title = "Worker 0 of loader 3 is stuck; loader 31 is not";
  fs[2].loader = 1, fs[2].title = "Loader 1 has produced no batch";
  fs[3].loader = -1, fs[3].title = "6 DataLoader workers share 2 usable CPUs";
  fs[4].loader = 4, fs[4].title = "Loader 4: no rank known";
  s.label_ranks(fs);
  EXPECT_EQ(fs[0].title, "Rank 1 \xc2\xb7 loader 1: __getitem__ is too slow");
  EXPECT_EQ(fs[0].rank, 1);
  EXPECT_EQ(fs[1].title, "Worker 0 of rank 1 \xc2\xb7 loader 2 is stuck; loader 31 is not");
  EXPECT_EQ(fs[2].title, "Rank 0 \xc2\xb7 loader 1 has produced no batch");  // not relabelled
  EXPECT_EQ(fs[2].rank, 0);
  EXPECT_EQ(fs[3].rank, -1);
  EXPECT_EQ(fs[4].title, "Loader 4: no rank known");
  EXPECT_EQ(fs[4].rank, -1);
  s.label_ranks(fs);  // idempotent: the merged hang findings pass through twice
  EXPECT_EQ(fs[2].title, "Rank 0 \xc2\xb7 loader 1 has produced no batch");
}

}  // namespace
}  // namespace dldoctor::analyze
