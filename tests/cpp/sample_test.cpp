// The /proc readers on recorded file contents (odd command names, missing fields, files cut
// short), the tree order, and the sampler on this test process itself.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/sample/cpu_times.hpp"
#include "dldoctor_core/sample/cpu_top.hpp"
#include "dldoctor_core/sample/field.hpp"
#include "dldoctor_core/sample/io.hpp"
#include "dldoctor_core/sample/meminfo.hpp"
#include "dldoctor_core/sample/pressure.hpp"
#include "dldoctor_core/sample/proc_file.hpp"
#include "dldoctor_core/sample/process_reader.hpp"
#include "dldoctor_core/sample/process_tree.hpp"
#include "dldoctor_core/sample/sampler.hpp"
#include "dldoctor_core/sample/schedstat.hpp"
#include "dldoctor_core/sample/smaps_rollup.hpp"
#include "dldoctor_core/sample/stat.hpp"
#include "dldoctor_core/sample/status.hpp"
#include "dldoctor_core/sample/thread_pools.hpp"
#include "dldoctor_core/sample/vmstat.hpp"
#include "dldoctor_core/sample/wchan.hpp"

using namespace dldoctor::sample;

namespace {
// A real line of a DataLoader worker (Linux 6.x), with its fields in their places.
constexpr const char* kWorkerStat =
    "4242 (pt_data_worker) S 4200 4200 3928 34816 4200 4194368 21034 0 3 0 1234 56 0 0 20 0 1 "
    "0 26264 1289764864 53210 18446744073709551615 94064550309888 94064550329769 "
    "140736295238032 0 0 0 0 16781312 134234626 1 0 0 17 1 0 0 0 0 0 94064550345776 "
    "94064550347392 94064991178752 140736295246562 140736295246582 140736295246582 "
    "140736295247851 0\n";
}  // namespace

TEST(SampleStat, ParsesAWorkerLine) {
  auto f = parse_stat(kWorkerStat);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->comm, "pt_data_worker");
  EXPECT_EQ(f->state, 'S');
  EXPECT_EQ(f->ppid, 4200);
  EXPECT_EQ(f->utime_ticks, 1234);
  EXPECT_EQ(f->stime_ticks, 56);
  EXPECT_EQ(f->num_threads, 1);
  EXPECT_EQ(f->start_ticks, 26264);
  EXPECT_EQ(f->rss_pages, 53210);
}

TEST(SampleStat, CommWithSpacesAndParens) {
  auto f = parse_stat("77 (a) b (c)) d) R 1 77 77 0 -1 4194304 9 0 0 0 7 3 0 0 20 0 4 0 99 1 2\n");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->comm, "a) b (c)) d");
  EXPECT_EQ(f->state, 'R');
  EXPECT_EQ(f->ppid, 1);
  EXPECT_EQ(f->utime_ticks, 7);
  EXPECT_EQ(f->stime_ticks, 3);
  EXPECT_EQ(f->num_threads, 4);
  EXPECT_EQ(f->start_ticks, 99);
  EXPECT_EQ(f->rss_pages, 2);
}

TEST(SampleStat, NegativeFieldsAreSkippedNotMisread) {
  // tpgid -1 and a real-time priority of -51 sit before the fields we keep.
  auto f = parse_stat("9 (rt) S 2 0 0 0 -1 0 0 0 0 0 5 6 0 0 -51 -20 3 0 11 0 12\n");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->utime_ticks, 5);
  EXPECT_EQ(f->num_threads, 3);
  EXPECT_EQ(f->rss_pages, 12);
}

TEST(SampleStat, CutShortLeavesLaterFieldsUnknown) {
  auto f = parse_stat("4242 (w) Z 4200 4200 3928 0 -1 4194368 1 0 0 0 12");
  ASSERT_TRUE(f);
  EXPECT_EQ(f->state, 'Z');
  EXPECT_EQ(f->utime_ticks, 12);
  EXPECT_FALSE(f->stime_ticks);
  EXPECT_FALSE(f->num_threads);
  EXPECT_FALSE(f->start_ticks);
  EXPECT_FALSE(f->rss_pages);
}

TEST(SampleStat, UnusableLinesAreEmpty) {
  EXPECT_FALSE(parse_stat(""));
  EXPECT_FALSE(parse_stat("4242 (worker"));     // no closing paren
  EXPECT_FALSE(parse_stat("4242 (worker) "));   // no state
  EXPECT_FALSE(parse_stat("4242 (worker) S"));  // no parent
  EXPECT_FALSE(parse_stat("4242 (worker) S x"));
}

TEST(SampleSchedstat, ParsesAndRejects) {
  auto s = parse_schedstat("560662545 309900 22\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->run_ns, 560662545);
  EXPECT_EQ(s->wait_ns, 309900);
  EXPECT_EQ(s->timeslices, 22);
  auto two = parse_schedstat("5 6");
  ASSERT_TRUE(two);
  EXPECT_FALSE(two->timeslices);
  EXPECT_FALSE(parse_schedstat("560662545"));
  EXPECT_FALSE(parse_schedstat(""));
}

TEST(SampleStatus, ParsesSwitchesAndRss) {
  auto s = parse_status(
      "Name:\tpython3\nState:\tS (sleeping)\nVmPeak:\t  30000 kB\nVmRSS:\t   17644 kB\n"
      "Threads:\t1\nvoluntary_ctxt_switches:\t150\nnonvoluntary_ctxt_switches:\t7\n");
  EXPECT_EQ(s.voluntary_cs, 150);
  EXPECT_EQ(s.involuntary_cs, 7);
  EXPECT_EQ(s.rss_bytes, 17644 * 1024);
}

TEST(SampleStatus, KernelThreadHasNoRss) {
  auto s = parse_status("Name:\tkworker/0:1\nState:\tI (idle)\nvoluntary_ctxt_switches:\t9\n");
  EXPECT_FALSE(s.rss_bytes);
  EXPECT_EQ(s.voluntary_cs, 9);
  EXPECT_FALSE(s.involuntary_cs);  // "nonvoluntary" is not matched by "voluntary"
}

TEST(SampleIo, ParsesAndCutShort) {
  auto io =
      parse_io("rchar: 6976\nwchar: 0\nsyscr: 10\nsyscw: 0\nread_bytes: 4096\nwrite_bytes: 0\n");
  EXPECT_EQ(io.rchar, 6976);
  EXPECT_EQ(io.read_bytes, 4096);
  auto cut = parse_io("rchar: 6976\nwchar: 0\nsys");
  EXPECT_EQ(cut.rchar, 6976);
  EXPECT_FALSE(cut.read_bytes);
  auto none = parse_io("");
  EXPECT_FALSE(none.rchar);
}

TEST(SampleSmapsRollup, PssIsNotPssAnon) {
  auto s = parse_smaps_rollup(
      "55dcfdc87000-7fff1fc21000 ---p 00000000 00:00 0    [rollup]\nRss:  1764 kB\n"
      "Pss_Anon:   100 kB\nPss:   539 kB\nPss_Dirty:   99 kB\nPrivate_Clean:  4 kB\n"
      "Private_Dirty:   220 kB\n");
  EXPECT_EQ(s.pss_bytes, 539 * 1024);
  EXPECT_EQ(s.private_dirty_bytes, 220 * 1024);
  auto missing = parse_smaps_rollup("Rss:  1764 kB\n");
  EXPECT_FALSE(missing.pss_bytes);
  EXPECT_FALSE(missing.private_dirty_bytes);
}

TEST(SampleSmapsRollup, ReadLessOftenWhileTheGrowthIsSlow) {
  // A worker copying 0.4 MiB/s (a list-backed dataset's refcounts): the gap doubles up to 8
  // periods and stays there, where a 1 MiB-per-read test called it growing at 4 periods (4 s
  // of 1 MiB/s... 1.6 MiB) and started over. 1 MiB/s or more: read every period again.
  using dldoctor::sample::ProcessReader;
  constexpr int64_t kMiB = 1 << 20, kS = 1'000'000'000;
  uint32_t b = 1;
  int64_t dirty = 10 * kMiB;
  for (int i = 0; i < 6; ++i) {
    const int64_t dt = int64_t(b) * kS;  // smaps_every periods of 1 s
    const int64_t now = dirty + dt * 4 / 10 * kMiB / kS;
    b = ProcessReader::next_smaps_backoff(b, dirty, now, dt);
    dirty = now;
  }
  EXPECT_EQ(b, ProcessReader::kSmapsMaxBackoff);
  EXPECT_EQ(ProcessReader::next_smaps_backoff(b, dirty, dirty + 9 * kMiB, 8 * kS), 1u);
  EXPECT_EQ(ProcessReader::next_smaps_backoff(b, dirty, dirty - kMiB, 8 * kS), 8u);  // freed
  EXPECT_EQ(ProcessReader::next_smaps_backoff(4, std::nullopt, dirty, kS), 1u);  // first read
  EXPECT_EQ(ProcessReader::next_smaps_backoff(2, dirty, dirty, kS), 4u);
}

TEST(SampleWchan, ZeroMeansNone) {
  EXPECT_EQ(parse_wchan("futex_wait_queue"), "futex_wait_queue");
  EXPECT_EQ(parse_wchan("0"), "");
  EXPECT_EQ(parse_wchan(""), "");
}

TEST(SampleCpuTimes, BusyLeavesOutIdleAndIowait) {
  auto t = parse_cpu_times("cpu  100 5 50 1000 20 1 2 3 40 0\ncpu0 50 2 25 500 10 0 1 1 20 0\n");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->busy, 100 + 5 + 50 + 1 + 2 + 3);
  EXPECT_EQ(t->total, t->busy + 1000 + 20);
  EXPECT_EQ(t->steal, 3);  // the eighth column, inside busy
  auto old = parse_cpu_times("cpu  1 2 3 4\n");
  ASSERT_TRUE(old);
  EXPECT_EQ(old->total, 10);
  EXPECT_EQ(old->steal, 0);
  EXPECT_FALSE(parse_cpu_times("cpu  1 2 3\n"));
  EXPECT_FALSE(parse_cpu_times("cpu0 1 2 3 4 5\n"));  // per-CPU lines are not the total
}

TEST(SampleMeminfo, MemAvailable) {
  EXPECT_EQ(parse_mem_available("MemTotal:  24000000 kB\nMemFree: 1 kB\nMemAvailable:  2048 kB\n"),
            2048 * 1024);
  EXPECT_FALSE(parse_mem_available("MemTotal:  24000000 kB\nMemFree: 1 kB\n"));
}

TEST(SampleVmstat, SwapCounters) {
  auto s = parse_vmstat("nr_free_pages 1\npswpin 12\npswpout 34\npswpin_extra 9\n");
  EXPECT_EQ(s.pswpin, 12);
  EXPECT_EQ(s.pswpout, 34);
  auto none = parse_vmstat("nr_free_pages 1\n");
  EXPECT_FALSE(none.pswpin);
}

TEST(SamplePressure, SomeAvg10) {
  EXPECT_DOUBLE_EQ(
      *parse_pressure_some_avg10("some avg10=1.35 avg60=2.56 avg300=1.55 total=7058490\n"
                                 "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"),
      1.35);
  EXPECT_FALSE(parse_pressure_some_avg10("full avg10=3.00 avg60=0.00\n"));
  EXPECT_FALSE(parse_pressure_some_avg10("some avg10=\n"));
}

TEST(SampleField, Overflow) {
  std::string_view s = "99999999999999999999999";
  EXPECT_FALSE(take_int(s));
  EXPECT_FALSE(kib_after("X: 9223372036854775807 kB", "X:"));
}

TEST(SampleTree, RootFirstThenBreadthFirst) {
  // 1 -> 10 -> {30, 20}; 20 -> 40; 50 unrelated; 60 is an extra root with child 61.
  std::vector<std::pair<int, int>> pp = {{1, 0},   {10, 1}, {30, 10}, {20, 10},
                                         {40, 20}, {50, 1}, {60, 50}, {61, 60}};
  EXPECT_EQ(tree_order({10}, pp), (std::vector<int>{10, 20, 30, 40}));
  EXPECT_EQ(tree_order({10, 60, 20}, pp), (std::vector<int>{10, 20, 30, 40, 60, 61}));
  EXPECT_EQ(tree_order({999}, pp), std::vector<int>{});
}

TEST(SampleTree, CycleDoesNotLoop) {
  std::vector<std::pair<int, int>> pp = {{5, 6}, {6, 5}};
  EXPECT_EQ(tree_order({5}, pp), (std::vector<int>{5, 6}));
}

TEST(SampleProcFile, KeptOpenAndBudget) {
  FdBudget budget(1);
  ReadBuffer buf(8);  // smaller than the file: the buffer must grow
  ProcFile kept("/proc/self/stat", &budget);
  ProcFile per_read("/proc/self/stat", &budget);
  EXPECT_TRUE(kept.kept_open());
  EXPECT_FALSE(per_read.kept_open());
  EXPECT_EQ(budget.left(), 0);
  auto a = kept.read(buf);
  ASSERT_TRUE(a);
  EXPECT_TRUE(parse_stat(*a));
  auto b = per_read.read(buf);
  ASSERT_TRUE(b);
  EXPECT_EQ(parse_stat(*b)->ppid, getppid());
  { ProcFile moved = std::move(kept); }
  EXPECT_EQ(budget.left(), 1);
  EXPECT_FALSE(ProcFile("/proc/self/no_such_file", &budget).read(buf));
  EXPECT_EQ(budget.left(), 1);
}

TEST(SampleProcFile, SpareHalf) {
  FdBudget budget(4);
  EXPECT_TRUE(budget.take_spare());  // 3 left
  EXPECT_TRUE(budget.take_spare());  // 2 left: no longer more than half
  EXPECT_FALSE(budget.take_spare());
  EXPECT_TRUE(budget.take());
  EXPECT_TRUE(budget.take());
  EXPECT_FALSE(budget.take());
}

TEST(SampleProcDir, ListsAgainThroughAKeptDescriptor) {
  FdBudget budget(2);
  ReadBuffer buf(64);  // smaller than one listing: getdents64 is called until the end
  ProcDir task("/proc/self/task", &budget);
  std::vector<int> tids;
  ASSERT_TRUE(task.numbers(buf, tids));
  EXPECT_NE(std::find(tids.begin(), tids.end(), int(syscall(SYS_gettid))), tids.end());
  tids.clear();
  ASSERT_TRUE(task.numbers(buf, tids));  // rewound, not at its end
  EXPECT_FALSE(tids.empty());

  ProcDir fds("/proc/self/fd", &budget);
  auto before = fds.count(buf);
  ASSERT_TRUE(before);
  int extra = dup(0);
  EXPECT_EQ(fds.count(buf), *before + 1);
  close(extra);
  EXPECT_FALSE(ProcDir("/proc/self/no_such_dir", &budget).count(buf));
}

TEST(SampleTree, ListsAgainOnlyWhenTheForkCounterMoves) {
  ProcessTree tree;
  ReadBuffer buf;
  EXPECT_EQ(tree.members({getpid()}, buf, 100), std::vector<int>{getpid()});
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  // Same counter: the listing is not repeated, so the child is not seen yet.
  EXPECT_EQ(tree.members({getpid()}, buf, 100), std::vector<int>{getpid()});
  EXPECT_EQ(tree.members({getpid()}, buf, 101), (std::vector<int>{getpid(), child}));
  EXPECT_EQ(tree.listings(), 2u);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  tree.forget(child);
  EXPECT_EQ(tree.members({getpid()}, buf, 101), std::vector<int>{getpid()});
}

TEST(SampleSampler, WorksWithNoKeptDescriptors) {
  Sampler sampler(getpid(), SamplerOptions{.smaps_every = 1, .threads = true, .max_kept_fds = 0});
  sampler.sample_once();
  Snapshot s = sampler.sample_once();
  ASSERT_FALSE(s.processes.empty());
  const ProcessSample& me = s.processes.front();
  EXPECT_TRUE(me.cpu_pct);
  EXPECT_TRUE(me.runq_delay_pct);
  EXPECT_TRUE(me.rchar_per_s);
  EXPECT_TRUE(me.voluntary_cs_per_s);
  EXPECT_TRUE(me.open_fds);
  EXPECT_FALSE(me.threads.empty());
}

TEST(SampleSampler, SmapsOfThePreferredOnly) {
  // An attached job reads its workers' smaps_rollup alone: a process the callback does not
  // prefer is never read (no pss), one it prefers is.
  for (const bool prefer_me : {false, true}) {
    Sampler sampler(getpid(), SamplerOptions{.smaps_every = 1, .smaps_budget_pct = 0,
                                             .smaps_preferred_only = true});
    const int me = getpid();
    sampler.set_smaps_priority([me, prefer_me](int pid) { return prefer_me && pid == me; });
    Snapshot s = sampler.sample_once();
    ASSERT_FALSE(s.processes.empty());
    EXPECT_EQ(bool(s.processes.front().pss_bytes), prefer_me);
    EXPECT_EQ(s.processes.front().smaps_fresh, prefer_me);
  }
}

TEST(SampleSampler, APreferredProcessIsReadAtOnceWhateverTheBudgetOwes) {
  // The first smaps read of this process empties a tiny bucket; a preferred child forked
  // after it is read on its first pass all the same (its memory series' baseline), while
  // this process, due again, waits for the bucket.
  Sampler sampler(getpid(), SamplerOptions{.smaps_every = 1, .smaps_budget_pct = 1e-6});
  const int me = getpid();
  Snapshot first = sampler.sample_once();
  ASSERT_FALSE(first.processes.empty());
  EXPECT_TRUE(first.processes.front().smaps_fresh);
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  sampler.set_smaps_priority([child](int pid) { return pid == child; });
  std::optional<ProcessSample> mine, theirs;
  for (int tries = 0; tries < 200 && !theirs; ++tries) {
    Snapshot s = sampler.sample_once();
    for (const ProcessSample& p : s.processes) {
      if (p.pid == me) mine = p;
      if (p.pid == child) theirs = p;
    }
    if (!theirs) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(theirs);
  EXPECT_TRUE(theirs->smaps_fresh);
  EXPECT_TRUE(theirs->private_dirty_bytes);
  ASSERT_TRUE(mine);
  EXPECT_FALSE(mine->smaps_fresh);
}

TEST(SampleSampler, AYoungProcessIsFirstReadOnceItIsOldEnough) {
  // smaps_min_age_ns: a child forked now is listed at once but its smaps_rollup waits until
  // it has existed that long (start ticks are 10 ms coarse: the checks keep clear of it).
  constexpr int64_t kMinAgeNs = 400'000'000;
  Sampler sampler(getpid(), SamplerOptions{.smaps_every = 1, .smaps_budget_pct = 0,
                                           .smaps_min_age_ns = kMinAgeNs});
  const auto forked = std::chrono::steady_clock::now();
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  auto child_sample = [&]() -> std::optional<ProcessSample> {
    for (const ProcessSample& p : sampler.sample_once().processes)
      if (p.pid == child) return p;
    return std::nullopt;
  };
  auto elapsed = [&] { return std::chrono::steady_clock::now() - forked; };
  std::optional<ProcessSample> young;
  for (int tries = 0; tries < 100 && !young; ++tries) young = child_sample();
  const bool still_young = elapsed() < std::chrono::milliseconds(300);
  std::this_thread::sleep_until(forked + std::chrono::milliseconds(450));
  std::optional<ProcessSample> old = child_sample();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(young);
  if (still_young) {
    EXPECT_FALSE(young->smaps_fresh);
    EXPECT_FALSE(young->pss_bytes);
  }
  ASSERT_TRUE(old);
  EXPECT_TRUE(old->smaps_fresh);
  EXPECT_TRUE(old->pss_bytes);
}

TEST(SampleSampler, AFlatProcessIsReadLessOftenUntilItsMemoryGrows) {
  // Every pass is a smaps period here: a process whose private memory stays flat is read
  // again after 1, 2, 4 ... periods; a growth brings it back to every period.
  Sampler sampler(getpid(), SamplerOptions{.smaps_every = 1, .smaps_budget_pct = 0});
  auto fresh = [&] {
    Snapshot s = sampler.sample_once();
    return !s.processes.empty() && s.processes.front().smaps_fresh;
  };
  std::vector<bool> seen;
  for (int i = 0; i < 4; ++i) seen.push_back(fresh());
  EXPECT_EQ(seen, (std::vector<bool>{true, true, false, true}));
  std::vector<char> grown(16 << 20);
  for (size_t i = 0; i < grown.size(); i += 4096) grown[i] = char(i);  // 16 MiB written
  seen.clear();
  for (int i = 0; i < 5; ++i) seen.push_back(fresh());
  EXPECT_EQ(seen, (std::vector<bool>{false, false, false, true, true}));
  EXPECT_NE(grown[4096], 1);
}

TEST(SampleSampler, SelfFirstRatesOnSecondPass) {
  Sampler sampler(getpid(), SamplerOptions{.smaps_every = 1, .threads = true});
  Snapshot first = sampler.sample_once();
  ASSERT_FALSE(first.processes.empty());
  const ProcessSample& me = first.processes.front();
  EXPECT_EQ(me.pid, getpid());
  EXPECT_FALSE(me.cpu_pct);  // no previous pass
  EXPECT_TRUE(me.cpu_ns_total);
  EXPECT_TRUE(me.rss_bytes);
  EXPECT_TRUE(me.pss_bytes);  // the first read of a process includes the slow sources
  EXPECT_TRUE(me.open_fds);
  EXPECT_EQ(me.state, 'R');
  EXPECT_FALSE(first.machine.cpu_busy_pct);
  EXPECT_TRUE(first.machine.mem_available_bytes);

  // Burn some CPU so the second pass sees it.
  auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(60);
  volatile uint64_t x = 0;
  while (std::chrono::steady_clock::now() < until) x = x + 1;
  Snapshot second = sampler.sample_once();
  const ProcessSample& again = second.processes.front();
  ASSERT_TRUE(again.cpu_pct);
  ASSERT_TRUE(again.runq_delay_pct);
  // A spinning thread is either on a CPU or waiting for one; how the two split depends on
  // what else this shared machine runs.
  EXPECT_GT(*again.cpu_pct + *again.runq_delay_pct, 60.0);
  EXPECT_GT(*again.cpu_pct, 10.0);
  EXPECT_TRUE(second.machine.cpu_busy_pct);
  ASSERT_FALSE(again.threads.empty());
  EXPECT_EQ(again.threads.front().tid, getpid());
  EXPECT_GT(second.cost_ns, 0);
  EXPECT_EQ(second.seq, 2u);
  EXPECT_EQ(sampler.samples_taken(), 2u);
  EXPECT_EQ(sampler.latest()->seq, 2u);
}

TEST(SampleSampler, ThreadRunsCallbackAndBoundedHistory) {
  Sampler sampler(getpid(), SamplerOptions{.interval_ns = 5'000'000, .capacity = 3});
  std::atomic<int> calls{0};
  sampler.set_callback([&](const Snapshot& s) {
    EXPECT_FALSE(s.processes.empty());
    ++calls;
  });
  sampler.start();
  sampler.start();  // a second start does nothing
  while (calls.load() < 5) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  sampler.stop();
  EXPECT_FALSE(sampler.running());
  auto h = sampler.history();
  ASSERT_EQ(h.size(), 3u);
  EXPECT_LT(h[0].seq, h[1].seq);
  EXPECT_LT(h[1].seq, h[2].seq);
  EXPECT_EQ(h[2].seq, sampler.latest()->seq);
  EXPECT_EQ(sampler.history(1).front().seq, h[2].seq);
  EXPECT_GE(sampler.samples_taken(), 5u);
  EXPECT_GT(sampler.cost_ns_total(), 0);
}

TEST(SampleSampler, StopFromTheCallbackEndsTheThread) {
  Sampler sampler(getpid(), SamplerOptions{.interval_ns = 1'000'000});
  std::atomic<int> calls{0};
  sampler.set_callback([&](const Snapshot&) {
    ++calls;
    sampler.stop();
  });
  sampler.start();
  while (calls.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(calls.load(), 1);
  sampler.stop();
  EXPECT_FALSE(sampler.running());
}

TEST(SampleSampler, MissingRootIsAnError) {
  EXPECT_THROW(Sampler(0), dldoctor::Error);
  EXPECT_THROW(Sampler(1 << 30), dldoctor::Error);
  Sampler sampler(getpid());
  EXPECT_THROW(sampler.add_root(1 << 30), dldoctor::Error);
  EXPECT_THROW(Sampler(getpid(), SamplerOptions{.interval_ns = 0}), dldoctor::Error);
}

// ---- thread pools and active threads ---------------------------------------------------

namespace dldoctor {
namespace {

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
}  // namespace dldoctor

// The CPU top of `dldoctor check`: ticks between two readings, per process, most first.
TEST(SampleCpuTop, RanksByTicksBetweenReadings) {
  std::unordered_map<int, CpuReading> before{
      {10, {"cc1plus", 500, 1000}}, {11, {"python3", 600, 40}}, {12, {"idle", 700, 5}},
      {13, {"reused", 800, 0}}};
  std::unordered_map<int, CpuReading> after{
      {10, {"cc1plus", 500, 1090}},  // 90 ticks in 1 s at 100 Hz: 90 % of a CPU
      {11, {"python3", 600, 240}},   // two busy threads: 200 %
      {12, {"idle", 700, 5}},        // nothing used: left out
      {13, {"reused", 900, 50}},     // another start time: another process, left out
      {14, {"new", 950, 30}}};       // not in the first reading: left out
  auto top = rank_cpu_users(before, after, 1.0, 100.0, 5, 1.0);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0].pid, 11);
  EXPECT_DOUBLE_EQ(top[0].cpu_pct, 200.0);
  EXPECT_EQ(top[1].comm, "cc1plus");
  EXPECT_DOUBLE_EQ(top[1].cpu_pct, 90.0);
  // count and min_pct bound the list.
  EXPECT_EQ(rank_cpu_users(before, after, 1.0, 100.0, 1, 1.0).size(), 1u);
  EXPECT_EQ(rank_cpu_users(before, after, 1.0, 100.0, 5, 95.0).size(), 1u);
  EXPECT_TRUE(rank_cpu_users(before, after, 0.0, 100.0, 5, 1.0).empty());
}

// On the real /proc: a thread of this test busy for the window is found in this process.
TEST(SampleCpuTop, FindsABusyThreadOfThisProcess) {
  std::atomic<bool> stop{false};
  std::thread spin([&] {
    volatile uint64_t x = 0;
    while (!stop.load(std::memory_order_relaxed)) x = x + 1;
  });
  auto top = top_cpu_users("/proc", 0.5, 64, 0.0);
  stop = true;
  spin.join();
  auto self = std::find_if(top.begin(), top.end(),
                           [](const CpuUser& u) { return u.pid == ::getpid(); });
  ASSERT_NE(self, top.end());
  EXPECT_GT(self->cpu_pct, 5.0);
  EXPECT_FALSE(self->cmdline.empty());
}
