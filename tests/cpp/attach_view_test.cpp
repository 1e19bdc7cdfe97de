// The attach session: py-spy-shaped stack samples read into places by the hang captures'
// reader, shares into the view (stall, fetch shares, CPU over the fetch, hot frames), the
// rules' decision on it, the stuck-tree test and what stays unknown.
#include "dldoctor_core/analyze/attach_view.hpp"

#include <gtest/gtest.h>

#include "attach_sim.hpp"
#include "dldoctor_core/analyze/data_bound.hpp"

namespace dldoctor::analyze {
namespace {

using namespace attach_sim;

const report::Finding* find(const std::vector<report::Finding>& fs, const std::string& id) {
  for (const report::Finding& f : fs)
    if (f.id == id) return &f;
  return nullptr;
}
std::optional<double> num(const report::Finding& f, const std::string& name) {
  for (const report::Evidence& e : f.evidence)
    if (e.name == name)
      if (const double* x = std::get_if<double>(&e.value)) return *x;
  return std::nullopt;
}
std::string text(const report::Finding& f, const std::string& name) {
  for (const report::Evidence& e : f.evidence)
    if (e.name == name)
      if (const std::string* x = std::get_if<std::string>(&e.value)) return *x;
  return "";
}

TEST(AttachFrames, PySpyNamesReadAsFaulthandlerPrintsThem) {
  EXPECT_EQ(frame_from_pyspy("_MapDatasetFetcher.fetch", "/t/fetch.py", 54).function, "fetch");
  EXPECT_EQ(frame_from_pyspy("_MapDatasetFetcher.fetch.<locals>.<listcomp>", "f", 54).function,
            "<listcomp>");
  EXPECT_EQ(frame_from_pyspy("<module>", "f", 1).function, "<module>");
  EXPECT_FALSE(frame_from_pyspy("main", "f", 0).line);  // py-spy's 0: no line known
}

TEST(AttachFrames, PlacesOfTheSamples) {
  LoaderContext ctx;
  ctx.loader = 0;
  ctx.num_workers = 1;
  EXPECT_EQ(place_of_sample(getitem_stack(), 0, &ctx), SampledPlace::kGetitem);
  EXPECT_EQ(place_of_sample(reading_stack(), 0, &ctx), SampledPlace::kReading);
  EXPECT_EQ(place_of_sample(collate_stack(), 0, &ctx), SampledPlace::kCollate);
  EXPECT_EQ(place_of_sample(idle_stack(), 0, &ctx), SampledPlace::kIdle);
  EXPECT_EQ(place_of_sample(main_waiting(), -1, &ctx), SampledPlace::kInLoader);
  EXPECT_EQ(place_of_sample(main_stepping(), -1, &ctx), SampledPlace::kStep);
  EXPECT_EQ(place_of_sample(main_in_collective(), -1, &ctx), SampledPlace::kCollective);
}

TEST(AttachFrames, ReadsNamedOnTheCallersLine) {
  watchdog::PyFrame f = fr("__getitem__", "/job/ds.py", 30);
  EXPECT_FALSE(reading_frame(f));
  f.code = "got += self.conn.recv(PAYLOAD - len(got))";
  EXPECT_TRUE(reading_frame(f));
  f.code = "data = os.read(self.fd, 8)";
  EXPECT_TRUE(reading_frame(f));
  f.code = "x = np.asarray(im)";
  EXPECT_FALSE(reading_frame(f));
}

TEST(AttachSession, CpuBoundWorkersNeverIdleAreSlowGetitem) {
  AttachedLoader a = loader(1);
  AttachSession s({a}, cpus(2));
  passes(s, a, 10, 5, 95);
  s.add_samples(kMain, {thread({{main_waiting(), 140}, {main_stepping(), 60}})}, 0, 50);
  s.add_samples(kWorker0, {thread({{getitem_stack(), 196}, {idle_stack(), 4}})}, 3, 50);
  const JobView v = s.view();
  ASSERT_EQ(v.loaders.size(), 1u);
  const LoaderView& l = v.loaders[0];
  ASSERT_TRUE(l.stacks);
  EXPECT_NEAR(*l.data_stall_fraction, 0.7, 1e-9);
  EXPECT_NEAR(l.stacks->getitem, 0.98, 1e-9);
  EXPECT_NEAR(l.stacks->idle, 0.02, 1e-9);
  EXPECT_EQ(l.stacks->failed_samples, 3);
  EXPECT_NEAR(*l.on_cpu_fraction, 0.95 / 0.98, 1e-6);  // CPU over the time in the fetch
  EXPECT_FALSE(l.fetch_mean_s);                        // no batch was timed
  EXPECT_EQ(l.batches, 0);
  ASSERT_FALSE(l.hot_functions.empty());
  EXPECT_EQ(l.hot_functions[0].name, "__getitem__");
  EXPECT_NEAR(l.hot_functions[0].cumulative_ms, 196 * 50, 1e-6);

  const Decision d = s.decide({}, false);
  EXPECT_EQ(d.verdict, "slow_getitem");
  const report::Finding* f = find(d.findings, "slow_getitem");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, report::Severity::kCritical);
  EXPECT_EQ(text(*f, "worker_capacity_batches_per_s"), "unknown");
  EXPECT_EQ(text(*f, "getitem_p50_ms"), "unknown");
  EXPECT_NEAR(*num(*f, "stack_idle_share"), 0.02, 1e-9);
  EXPECT_NE(f->fix.find("decode_and_resize"), std::string::npos) << f->fix;
  EXPECT_NE(f->title.find("while the loop waits 70%"), std::string::npos) << f->title;
}

TEST(AttachSession, IdleWorkersWhileTheMainWaitsAreNotTheFetch) {
  AttachedLoader a = loader(1);
  AttachSession s({a}, cpus(2));
  passes(s, a, 10, 5, 40);
  s.add_samples(kMain, {thread({{main_waiting(), 140}, {main_stepping(), 60}})}, 0, 50);
  // Idle half the time: the worker could supply more; the stall has another cause.
  s.add_samples(kWorker0, {thread({{getitem_stack(), 100}, {idle_stack(), 100}})}, 0, 50);
  const Decision d = s.decide({}, false);
  EXPECT_EQ(find(d.findings, "slow_getitem"), nullptr);
  EXPECT_EQ(find(d.findings, "io_bound"), nullptr);
}

TEST(AttachSession, WorkersWaitingOnReadsAreIoBound) {
  AttachedLoader a = loader(1);
  AttachSession s({a}, cpus(2));
  passes(s, a, 10, 3, 6);
  s.add_samples(kMain, {thread({{main_waiting(), 180}, {main_stepping(), 20}})}, 0, 50);
  s.add_samples(kWorker0, {thread({{reading_stack(), 190}, {getitem_stack(), 10}})}, 0, 50);
  const Decision d = s.decide({}, false);
  EXPECT_EQ(d.verdict, "io_bound");
  const report::Finding* f = find(d.findings, "io_bound");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(*num(*f, "stack_reading_share"), 0.95, 1e-9);
  EXPECT_NE(text(*f, "hot_functions").find("__getitem__"), std::string::npos);
  // Sized from the stall alone: 1 worker / (1 - 0.9) x 1.1, capped by the CPUs' share.
  EXPECT_GE(*num(*f, "recommended_num_workers"), 2);
}

TEST(AttachSession, AKeptUpLoaderIsQuiet) {
  AttachedLoader a = loader(1);
  AttachSession s({a}, cpus(2));
  passes(s, a, 10, 20, 10);
  s.add_samples(kMain, {thread({{main_waiting(), 4}, {main_stepping(), 196}})}, 0, 50);
  s.add_samples(kWorker0, {thread({{getitem_stack(), 20}, {idle_stack(), 180}})}, 0, 50);
  const Decision d = s.decide({}, false);
  EXPECT_EQ(d.verdict, "healthy");
  for (const report::Finding& f : d.findings) EXPECT_EQ(f.severity, report::Severity::kInfo);
}

TEST(AttachSession, FewSamplesAreNotJudged) {
  AttachedLoader a = loader(1);
  AttachSession s({a}, cpus(2));
  passes(s, a, 10, 5, 95);
  const int64_t n = kMinStackSamples - 1;
  s.add_samples(kMain, {thread({{main_waiting(), n}})}, 0, 50);
  s.add_samples(kWorker0, {thread({{getitem_stack(), n}})}, 0, 50);
  EXPECT_FALSE(stalled(s.view().loaders[0]));
  EXPECT_TRUE(s.stuck_loaders().empty());
}

TEST(AttachSession, TheLoopThreadIsReadNotTheOthers) {
  AttachedLoader a = loader(1);
  AttachSession s({a}, cpus(2));
  passes(s, a, 10, 5, 95);
  // A logging thread samples as often as the loop; the loop's thread is the one in the loader.
  s.add_samples(kMain,
                {thread({{main_stepping(), 200}}, "logger"),
                 thread({{main_waiting(), 150}, {main_stepping(), 50}}, "trainer")},
                0, 50);
  const std::vector<ProcessTally> t = s.tallies();
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].thread, "trainer");
  EXPECT_NEAR(*s.view().loaders[0].data_stall_fraction, 0.75, 1e-9);
}

TEST(AttachSession, AStuckTreeIsNoLongerASlowOne) {
  AttachedLoader a = loader(2);
  AttachSession s({a}, cpus(2));
  passes(s, a, 10, 0, 0);
  s.add_samples(kMain, {thread({{main_waiting(), 200}})}, 0, 50);
  for (int i = 0; i < 2; ++i)
    s.add_samples(kWorker0 + i, {thread({{collate_stack(), 200}})}, 0, 50);
  EXPECT_EQ(s.stuck_loaders(), std::vector<int>{0});
  // Before the capture the throughput rules would call it slow; after it, they do not.
  watchdog::HangSnapshot snap = s.capture_hang({}, {});
  EXPECT_EQ(snap.processes.size(), 3u);
  EXPECT_FALSE(s.view().loaders[0].data_stall_fraction);
}

TEST(AttachSession, AWorkerUsingCpuIsNotStuck) {
  AttachedLoader a = loader(1);
  AttachSession s({a}, cpus(2));
  passes(s, a, 10, 0, 30);
  s.add_samples(kMain, {thread({{main_waiting(), 200}})}, 0, 50);
  s.add_samples(kWorker0, {thread({{getitem_stack(), 200}})}, 0, 50);
  EXPECT_TRUE(s.stuck_loaders().empty());
}

TEST(AttachSession, AWorkerReadingASlowStoreIsNotStuck) {
  // Off-CPU (2% of a core) and in __getitem__ the whole window, but its bytes keep coming:
  // io_bound's workers, not a hang. The same tree reading nothing is stuck.
  for (double rchar : {130e3, 0.0}) {
    AttachedLoader a = loader(1);
    AttachSession s({a}, cpus(2));
    for (int64_t t = kT0; t < kT0 + 10 * kS; t += kS / 10) {
      sample::Snapshot snap;
      snap.t_ns = t;
      for (int pid : {a.main_pid, a.worker_pids[0]}) {
        sample::ProcessSample p;
        p.pid = pid;
        p.state = 'S';
        p.num_threads = 2;
        p.cpu_pct = 2.0;
        p.cpu_ns_total = int64_t(0.02 * double(t - kT0));
        if (pid != a.main_pid) p.rchar_per_s = rchar;
        snap.processes.push_back(p);
      }
      s.ingest(snap);
    }
    s.set_window(kT0, kT0 + 10 * kS);
    s.add_samples(kMain, {thread({{main_waiting(), 200}})}, 0, 50);
    s.add_samples(kWorker0, {thread({{getitem_stack(), 200}})}, 0, 50);
    EXPECT_EQ(s.stuck_loaders().empty(), rchar > 0) << rchar;
  }
}

TEST(AttachSession, TheCustomCollateSeenInTheStacksNamesTheLoadersCollate) {
  AttachedLoader a = loader(1);
  AttachSession s({a}, cpus(2));
  passes(s, a, 10, 0, 0);
  auto custom = worker({fr("acquire", "/py/lib/python3.11/threading.py", 100),
                        fr("collate_with_stats", "/job/train.py", 21),
                        fr("fetch", kTorch + "_utils/fetch.py", 55)});
  custom[2].code = "return self.collate_fn(data)";  // what torch's fetch.py has on line 55
  s.add_samples(kWorker0, {thread({{custom, 50}})}, 0, 50);
  EXPECT_EQ(s.collate_fn(a), "collate_with_stats");
  EXPECT_EQ(s.hang_context().loaders.at(0).collate_fn, "collate_with_stats");
  EXPECT_TRUE(s.view().loaders[0].config.custom_collate());
}

TEST(AttachSession, ThreadsAtForkOnlyUnderFork) {
  AttachedLoader a = loader(1);
  AttachedLoader b = loader(1);
  b.loader = 1;
  b.main_pid = kMain + 10;
  b.worker_pids = {kMain + 11};
  b.start_method = trace::StartMethod::kSpawn;
  AttachSession s({a, b}, cpus(2));
  s.note_threads_at_fork(kMain, {"stats-writer"});
  s.note_threads_at_fork(kMain + 10, {"other"});
  const watchdog::HangContext c = s.hang_context();
  EXPECT_EQ(c.loaders.at(0).main_threads_at_fork, 2);
  EXPECT_EQ(c.loaders.at(0).main_thread_names_at_fork, std::vector<std::string>{"stats-writer"});
  EXPECT_FALSE(c.loaders.at(1).main_threads_at_fork);
}

TEST(AttachSession, WithoutStacksNothingIsCalledHealthy) {
  AttachedLoader a = loader(1);
  AttachSession s({a}, cpus(2));
  passes(s, a, 10, 5, 95);
  EXPECT_EQ(s.decide({}, false).verdict, "unknown");
}

TEST(AttachSession, KeepLoadersForgetsTheUnconfirmed) {
  AttachedLoader a = loader(1);
  AttachedLoader b;
  b.loader = 1;
  b.main_pid = kMain + 20;
  AttachSession s({a, b}, cpus(2));
  s.keep_loaders({0});
  ASSERT_EQ(s.loaders().size(), 1u);
  EXPECT_EQ(s.view().loaders.size(), 1u);
}

TEST(AttachSession, MemoryIsReadOfTwoWorkersTakenInTurnFromEachLoader) {
  // One loader: its first two workers. A dead worker is skipped.
  AttachedLoader a = loader(4);
  a.worker_pids[0] = -1;
  EXPECT_EQ(AttachSession({a}, cpus(2)).memory_workers(),
            (std::vector<int>{kWorker0 + 1, kWorker0 + 2}));
  // Two loaders (ranks, or training and validation): the first worker of each.
  AttachedLoader b;
  b.loader = 1;
  b.main_pid = kMain + 20;
  b.num_workers = 2;
  b.worker_pids = {kMain + 21, kMain + 22};
  EXPECT_EQ(AttachSession({loader(4), b}, cpus(2)).memory_workers(),
            (std::vector<int>{kWorker0, kMain + 21}));
  // Fewer workers than asked for, and none.
  EXPECT_EQ(AttachSession({loader(1)}, cpus(2)).memory_workers(), (std::vector<int>{kWorker0}));
  EXPECT_TRUE(AttachSession({loader(0)}, cpus(2)).memory_workers().empty());
}

TEST(AttachSession, AMainProcessThatFetchesItselfIsSerial) {
  AttachedLoader a;
  a.loader = 0;
  a.main_pid = kMain;
  a.num_workers = 0;
  AttachSession s({a}, cpus(2));
  passes(s, a, 10, 98, 0);
  auto in_main = std::vector<watchdog::PyFrame>{fr("decode_and_resize", "/job/ds.py", 35),
                                                fr("__getitem__", "/job/ds.py", 48),
                                                fr("fetch", kTorch + "_utils/fetch.py", 54),
                                                fr("_next_data", kTorch + "dataloader.py", 790),
                                                fr("__next__", kTorch + "dataloader.py", 725),
                                                fr("train", "/job/train.py", 60)};
  s.add_samples(kMain, {thread({{in_main, 150}, {main_stepping(), 50}})}, 0, 50);
  const LoaderView l = s.view().loaders.at(0);
  EXPECT_NEAR(*l.data_stall_fraction, 0.75, 1e-9);
  EXPECT_EQ(l.stacks->fetch_samples, 150);
  EXPECT_NEAR(l.stacks->getitem, 1.0, 1e-9);
  const Decision d = s.decide({}, false);
  const report::Finding* f = find(d.findings, "slow_getitem");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->title.find("the main process is fetching"), std::string::npos) << f->title;
}

}  // namespace
}  // namespace dldoctor::analyze
