// The event ring: ordering, no loss or duplication under many writers, drops when full
// without blocking, writers in other processes (fork, open by path), and a writer that
// died between reserving and publishing a slot. Then what the writers decide: which batches
// of a fast stream are measured (BatchSampler), which fetches are slow, the vocabulary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/trace/batch_sampler.hpp"
#include "dldoctor_core/trace/ring.hpp"
#include "dldoctor_core/trace/slow_fetch.hpp"

namespace fs = std::filesystem;
using dldoctor::trace::Event;
using dldoctor::trace::EventKind;
using dldoctor::trace::EventRing;
using dldoctor::trace::RingHeader;

namespace {

// A fresh directory per test, removed afterwards.
class TraceRing : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dldoctor-ring-test-XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const char* name = "ring") const { return (dir_ / name).string(); }
  fs::path dir_;
};

Event make_event(int16_t worker, int32_t index) {
  Event e;
  e.kind = EventKind::kWorkerBatch;
  e.pid = static_cast<uint32_t>(::getpid());
  e.worker = worker;
  e.index = index;
  e.loader = 7;
  e.count = 64;
  e.t_ns = 1000 + index;
  e.v[0] = index * 3;
  e.v[3] = -1;
  return e;
}

// A child process that maps the ring at `path` itself, as a spawned worker does, and writes
// `n` events of `worker` (exit 2: the ring was full, 3: it could not be opened).
pid_t writer_by_path(const std::string& path, int16_t worker, int n) {
  pid_t child = ::fork();
  if (child != 0) return child;
  try {
    auto mine = EventRing::open(path);
    for (int i = 0; i < n; ++i) {
      Event e = make_event(worker, i);
      e.pid = static_cast<uint32_t>(::getpid());
      if (!mine.emit(e)) ::_exit(2);
    }
  } catch (...) {
    ::_exit(3);
  }
  ::_exit(0);
}

// Fails the test unless `child` exited with 0.
void expect_exited_cleanly(pid_t child) {
  ASSERT_GE(child, 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  ASSERT_EQ(WEXITSTATUS(status), 0);
}

}  // namespace

TEST_F(TraceRing, RoundTripKeepsEveryField) {
  auto ring = EventRing::create(path(), 16);
  EXPECT_EQ(ring.capacity(), 16u);
  EXPECT_EQ(ring.watcher_pid(), static_cast<uint32_t>(::getpid()));
  Event e = make_event(3, 41);
  e.flags = 5;
  e.v[1] = -7;
  e.v[2] = INT64_MAX;
  e.weight = 9;
  ASSERT_TRUE(ring.emit(e));
  std::vector<Event> out;
  ASSERT_EQ(ring.drain(out), 1u);
  const Event& got = out[0];
  EXPECT_EQ(got.kind, EventKind::kWorkerBatch);
  EXPECT_EQ(got.pid, e.pid);
  EXPECT_EQ(got.t_ns, e.t_ns);
  EXPECT_EQ(got.flags, 5);
  EXPECT_EQ(got.loader, 7);
  EXPECT_EQ(got.worker, 3);
  EXPECT_EQ(got.index, 41);
  EXPECT_EQ(got.count, 64u);
  EXPECT_EQ(got.v[0], 123);
  EXPECT_EQ(got.v[1], -7);
  EXPECT_EQ(got.v[2], INT64_MAX);
  EXPECT_EQ(got.v[3], -1);
  EXPECT_EQ(got.weight, 9);
  EXPECT_EQ(ring.drain(out), 0u);
}

TEST_F(TraceRing, CapacityRoundsUpToPowerOfTwo) {
  auto ring = EventRing::create(path(), 1000);
  EXPECT_EQ(ring.capacity(), 1024u);
  EXPECT_EQ(fs::file_size(path()), 4096u + 1024u * sizeof(Event));
}

TEST_F(TraceRing, DrainRespectsMaxAndOrder) {
  auto ring = EventRing::create(path(), 64);
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(ring.emit(make_event(0, i)));
  std::vector<Event> out;
  EXPECT_EQ(ring.drain(out, 4), 4u);
  EXPECT_EQ(ring.pending(), 6u);
  EXPECT_EQ(ring.drain(out), 6u);
  ASSERT_EQ(out.size(), 10u);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(out[i].index, i);
}

TEST_F(TraceRing, WrapsAroundManyTimes) {
  auto ring = EventRing::create(path(), 8);
  std::vector<Event> out;
  for (int i = 0; i < 1000; ++i) {
    ASSERT_TRUE(ring.emit(make_event(0, i)));
    if (i % 5 == 4) ring.drain(out);
  }
  ring.drain(out);
  ASSERT_EQ(out.size(), 1000u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(out[i].index, i);
  EXPECT_EQ(ring.dropped(), 0u);
}

TEST_F(TraceRing, OpenErrorsAreOneLine) {
  EXPECT_THROW(EventRing::open(path("missing")), dldoctor::Error);
  {
    FILE* f = std::fopen(path("junk").c_str(), "w");
    std::string junk(8192, 'x');
    std::fwrite(junk.data(), 1, junk.size(), f);
    std::fclose(f);
  }
  try {
    EventRing::open(path("junk"));
    FAIL() << "a junk file opened as a ring";
  } catch (const dldoctor::Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("not an event ring"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos);
  }
  auto ring = EventRing::create(path(), 16);
  EXPECT_THROW(EventRing::create(path(), 16), dldoctor::Error);  // exclusive
  EXPECT_THROW(EventRing::create(path("zero"), 0), dldoctor::Error);
  EXPECT_THROW(EventRing::create((dir_ / "no" / "such" / "dir").string(), 16), dldoctor::Error);
}

TEST_F(TraceRing, MoveTransfersTheMapping) {
  auto a = EventRing::create(path(), 16);
  EventRing b = std::move(a);
  EXPECT_FALSE(a.valid());
  EXPECT_TRUE(b.valid());
  EXPECT_TRUE(b.emit(make_event(0, 1)));
  std::vector<Event> out;
  EXPECT_EQ(b.drain(out), 1u);
}

// Many writer threads and a concurrent reader; the ring is big enough never to be full, so
// every event must arrive exactly once and each writer's events in its own order.
TEST_F(TraceRing, ManyWritersOneReaderLoseNothing) {
  constexpr int kWriters = 4;
  constexpr int kPerWriter = 100'000;
  auto reader = EventRing::create(path(), size_t{1} << 19);
  std::atomic<int> done{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      auto ring = EventRing::open(path());  // each thread maps it itself, like a process
      for (int i = 0; i < kPerWriter; ++i) ASSERT_TRUE(ring.emit(make_event(int16_t(w), i)));
      done.fetch_add(1);
    });
  }
  std::vector<Event> out;
  out.reserve(kWriters * kPerWriter);
  while (done.load() < kWriters || reader.pending() > 0) {
    if (reader.drain(out) == 0) std::this_thread::yield();
  }
  for (auto& t : writers) t.join();
  reader.drain(out);
  ASSERT_EQ(out.size(), size_t(kWriters) * kPerWriter);
  std::vector<int32_t> next(kWriters, 0);
  for (const Event& e : out) {
    ASSERT_GE(e.worker, 0);
    ASSERT_LT(e.worker, kWriters);
    ASSERT_EQ(e.index, next[e.worker]) << "writer " << e.worker << " out of order or duplicated";
    ASSERT_EQ(e.v[0], int64_t(e.index) * 3);  // not torn
    ++next[e.worker];
  }
  EXPECT_EQ(reader.dropped(), 0u);
  EXPECT_EQ(reader.lost(), 0u);
}

// A small ring under the same load with a slow reader: writers never block, every refused
// event is counted, and what was accepted arrives exactly once.
TEST_F(TraceRing, FullRingDropsAndCountsWithoutBlocking) {
  constexpr int kWriters = 4;
  constexpr int kPerWriter = 50'000;
  auto reader = EventRing::create(path(), 64);
  std::atomic<uint64_t> accepted{0};
  std::atomic<int> done{0};
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      auto ring = EventRing::open(path());
      uint64_t ok = 0;
      for (int i = 0; i < kPerWriter; ++i) ok += ring.emit(make_event(int16_t(w), i));
      accepted.fetch_add(ok);
      done.fetch_add(1);
    });
  }
  std::vector<Event> out;
  while (done.load() < kWriters) {
    reader.drain(out, 16);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  for (auto& t : writers) t.join();
  reader.drain(out);
  EXPECT_GT(reader.dropped(), 0u);
  EXPECT_EQ(accepted.load() + reader.dropped(), uint64_t(kWriters) * kPerWriter);
  EXPECT_EQ(out.size(), accepted.load());
  std::vector<int32_t> last(kWriters, -1);
  for (const Event& e : out) {
    ASSERT_GT(e.index, last[e.worker]) << "duplicated or reordered";
    last[e.worker] = e.index;
  }
}

TEST_F(TraceRing, FullRingWithNoReaderStillReturns) {
  auto ring = EventRing::create(path(), 16);
  int ok = 0;
  for (int i = 0; i < 1000; ++i) ok += ring.emit(make_event(0, i));
  EXPECT_EQ(ok, 16);
  EXPECT_EQ(ring.dropped(), 984u);
  std::vector<Event> out;
  EXPECT_EQ(ring.drain(out), 16u);
  EXPECT_EQ(out.back().index, 15);
  EXPECT_TRUE(ring.emit(make_event(0, 2000)));  // room again
}

// A forked child inherits the mapping and writes into the parent's ring; a second child
// opens it by path, as a spawned worker does.
TEST_F(TraceRing, ForkedAndSpawnedLikeChildrenWrite) {
  auto ring = EventRing::create(path(), 4096);
  pid_t inherit = ::fork();
  ASSERT_GE(inherit, 0);
  if (inherit == 0) {
    for (int i = 0; i < 1000; ++i) {
      Event e = make_event(1, i);
      e.pid = static_cast<uint32_t>(::getpid());
      if (!ring.emit(e)) ::_exit(2);
    }
    ::_exit(0);
  }
  pid_t by_path = writer_by_path(path(), 2, 1000);
  for (pid_t child : {inherit, by_path}) expect_exited_cleanly(child);
  if (HasFatalFailure()) return;
  std::vector<Event> out;
  ASSERT_EQ(ring.drain(out), 2000u);
  std::map<int, int> per_worker;
  for (const Event& e : out) {
    EXPECT_EQ(e.pid, uint32_t(e.worker == 1 ? inherit : by_path));
    ASSERT_EQ(e.index, per_worker[e.worker]++);
  }
}

// The watcher's ring lives in memory: another process maps it by its /proc path (as the job
// and its spawned workers do), and the path goes with the ring.
TEST(TraceRingInMemory, OpenedByItsProcPathWhileItLives) {
  std::string where;
  {
    auto made = EventRing::create_in_memory(64);
    EventRing ring = std::move(made);  // the descriptor moves with it
    where = ring.path();
    const std::string prefix = "/proc/" + std::to_string(::getpid()) + "/fd/";
    ASSERT_EQ(where.rfind(prefix, 0), 0u) << where;
    EXPECT_EQ(ring.capacity(), 64u);
    expect_exited_cleanly(writer_by_path(where, 4, 50));
    if (HasFatalFailure()) return;
    std::vector<Event> out;
    ASSERT_EQ(ring.drain(out), 50u);
    EXPECT_EQ(out.back().index, 49);
    EXPECT_EQ(ring.next_loader_id(), 1);
  }
  EXPECT_THROW(EventRing::open(where), dldoctor::Error);  // closed with the ring
}

// A writer that reserved a slot and was killed before publishing it: the reader waits for
// it a bounded time, then skips it (counted as lost) and delivers everything after it.
TEST_F(TraceRing, WriterKilledMidWriteDoesNotStallTheReader) {
  auto ring = EventRing::create(path(), 64);
  ring.set_stall_timeout(std::chrono::milliseconds(50));
  ASSERT_TRUE(ring.emit(make_event(0, 0)));
  pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Do what emit() does up to the point of publishing, then die.
    int fd = ::open(path().c_str(), O_RDWR);
    void* base = ::mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    static_cast<RingHeader*>(base)->head.fetch_add(1);
    ::kill(::getpid(), SIGKILL);
    ::_exit(1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status));
  for (int i = 2; i < 6; ++i) ASSERT_TRUE(ring.emit(make_event(0, i)));

  std::vector<Event> out;
  EXPECT_EQ(ring.drain(out), 1u);  // event 0, then the dead slot holds the rest back
  EXPECT_EQ(ring.drain(out), 0u);
  std::this_thread::sleep_for(std::chrono::milliseconds(80));
  EXPECT_EQ(ring.drain(out), 4u);
  EXPECT_EQ(ring.lost(), 1u);
  ASSERT_EQ(out.size(), 5u);
  EXPECT_EQ(out[1].index, 2);
  EXPECT_EQ(out[4].index, 5);
  // The ring keeps working across the skipped slot's next round.
  for (int i = 0; i < 200; ++i) {
    ASSERT_TRUE(ring.emit(make_event(0, 100 + i)));
    ASSERT_EQ(ring.drain(out), 1u);
  }
  EXPECT_EQ(ring.lost(), 1u);
}

TEST_F(TraceRing, LoaderIdsAreUniqueAcrossThreads) {
  auto ring = EventRing::create(path(), 16);
  EXPECT_EQ(ring.next_loader_id(), 1);
  std::vector<std::thread> threads;
  std::vector<std::vector<uint16_t>> got(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      auto mine = EventRing::open(path());
      for (int i = 0; i < 1000; ++i) got[t].push_back(mine.next_loader_id());
    });
  }
  for (auto& t : threads) t.join();
  std::set<uint16_t> all;
  for (auto& v : got) all.insert(v.begin(), v.end());
  EXPECT_EQ(all.size(), 4000u);
  EXPECT_EQ(all.count(0), 0u);
}

TEST_F(TraceRing, ProgressIsEachLoadersOwnAndOfItsEpoch) {
  auto ring = EventRing::create(path(), 16);
  auto writer = EventRing::open(path());  // another process's mapping, as the job's
  EXPECT_EQ(ring.progress(3, 1), -1);     // nothing noted yet
  writer.note_progress(3, 1, 0);
  EXPECT_EQ(ring.progress(3, 1), 0);  // batch 0 is due: a key of its own, not "none"
  writer.note_progress(3, 1, 41);
  EXPECT_EQ(ring.progress(3, 1), 41);
  EXPECT_EQ(ring.progress(3, 2), -1);  // the next epoch noted nothing yet
  EXPECT_EQ(ring.progress(4, 1), -1);
  const auto largest = int64_t(dldoctor::trace::kProgressIndexMask);  // a key holds 40 bits
  writer.note_progress(3, 2, largest);
  EXPECT_EQ(ring.progress(3, 2), largest);
  // A loader sharing the slot overwrites it: the other reads "unknown", never its index.
  const uint16_t other = 3 + dldoctor::trace::kProgressSlots;
  writer.note_progress(other, 2, 7);
  EXPECT_EQ(ring.progress(other, 2), 7);
  EXPECT_EQ(ring.progress(3, 2), -1);
  // A fresh ring starts with every slot empty.
  auto fresh = EventRing::create(path("fresh"), 16);
  for (uint16_t l = 0; l < dldoctor::trace::kProgressSlots; ++l)
    EXPECT_EQ(fresh.progress(l, 0), -1);
}

TEST_F(TraceRing, ALoadersProfilesAreSpacedAcrossItsProcesses) {
  // Two mappings stand for two workers of one loader (or one worker and its successor of the
  // next epoch): the schedule is the loader's, in the ring, not either process's.
  auto a = EventRing::create(path(), 16);
  auto b = EventRing::open(path());
  constexpr int64_t ms = 1'000'000, first = 500 * ms, most = 8'000 * ms;
  const int64_t t = dldoctor::now_ns();
  EXPECT_TRUE(a.claim_profile(3, t, first, most));  // the loader's first candidate
  EXPECT_FALSE(b.claim_profile(3, t + 10 * ms, first, most));
  EXPECT_TRUE(b.claim_profile(4, t + 10 * ms, first, most));  // another loader's own
  EXPECT_FALSE(a.claim_profile(3, t + 495 * ms, first, most));
  EXPECT_TRUE(b.claim_profile(3, t + 500 * ms, first, most));
  // The spacing doubles with each profile taken (1 s now), up to `most`.
  EXPECT_FALSE(a.claim_profile(3, t + 1'495 * ms, first, most));
  EXPECT_TRUE(a.claim_profile(3, t + 1'500 * ms, first, most));
  EXPECT_FALSE(b.claim_profile(3, t + 3'495 * ms, first, most));
  EXPECT_TRUE(b.claim_profile(3, t + 3'500 * ms, first, most));
  int64_t at = t + 3'500 * ms;
  for (int64_t gap : {4'000, 8'000, 8'000, 8'000}) {
    EXPECT_FALSE(a.claim_profile(3, at + (gap - 5) * ms, first, most)) << gap;
    at += gap * ms;
    EXPECT_TRUE(a.claim_profile(3, at, first, most)) << gap;
  }
  // A loader sharing the slot starts afresh, and the first loader then does too.
  const uint16_t other = 3 + dldoctor::trace::kProgressSlots;
  EXPECT_TRUE(b.claim_profile(other, at + ms, first, most));
  EXPECT_FALSE(b.claim_profile(other, at + 2 * ms, first, most));
  EXPECT_TRUE(a.claim_profile(3, at + 3 * ms, first, most));
  // One claim wins among processes racing for the same candidate time.
  auto fresh = EventRing::create(path("race"), 16);
  std::atomic<int> won{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      auto mine = EventRing::open(path("race"));
      for (int k = 0; k < 1000; ++k) won += mine.claim_profile(9, t, first, most);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(won.load(), 1);
}

// -- Which batches of a stream are measured (BatchSampler) ----------------------------------
namespace {

using dldoctor::trace::BatchSampler;

constexpr int64_t kSecond = 1'000'000'000;

/// The period of a stream of 80,000 batches/s: 80,000 over 250 measured a second is 320, down
/// to a power of two.
constexpr uint32_t kFastPeriod = 256;
static_assert(dldoctor::trace::kMeasuredPerSecond == 250, "kFastPeriod follows the measured rate");

/// Feeds `n` batches at `per_second` to `s` from `t0`; returns {measured, sum of weights}.
std::pair<int64_t, int64_t> feed(BatchSampler& s, int64_t n, int64_t per_second, int64_t& t) {
  int64_t measured = 0, weights = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (s.take(t)) {
      ++measured;
      weights += s.weight();
    }
    t += kSecond / per_second;
  }
  return {measured, weights};
}

}  // namespace

TEST(BatchSampler, EveryBatchOfANormalLoaderIsMeasured) {
  BatchSampler s(7);
  int64_t t = kSecond;
  auto [measured, weights] = feed(s, 800, 400, t);  // two seconds at 400 batches/s
  EXPECT_EQ(measured, 800);
  EXPECT_EQ(weights, 800);
  EXPECT_EQ(s.period(), 1u);
  EXPECT_EQ(s.unmeasured(), 0u);
}

TEST(BatchSampler, SamplingStartsAtItsRateNotAtTheMeasuredRate) {
  using dldoctor::trace::kSampleAbovePerSecond;
  BatchSampler below(21), above(23);
  int64_t t = kSecond;
  const int64_t under = kSampleAbovePerSecond * 9 / 10, n = 2 * under;  // two seconds
  auto [measured, weights] = feed(below, n, under, t);
  EXPECT_EQ(measured, n);  // just under the rate: every batch measured, each for itself
  EXPECT_EQ(weights, n);
  EXPECT_EQ(below.period(), 1u);
  t = kSecond;
  feed(above, 2 * kSampleAbovePerSecond * 2, kSampleAbovePerSecond * 2, t);
  EXPECT_GT(above.period(), 1u);
}

TEST(BatchSampler, AStreamMayBeSampledFromALowerRate) {
  // A sampler's rates are its own: one that samples from 500 a second on (at 64 a second),
  // one that measures every batch up to 2,000 a second.
  BatchSampler hand_outs(29, 64, 500), fetches(31, dldoctor::trace::kMeasuredPerSecond, 2000);
  int64_t t = kSecond;
  auto [measured, weights] = feed(hand_outs, 4 * 1200, 1200, t);  // four seconds at 1,200/s
  EXPECT_EQ(hand_outs.period(), 16u);  // 1,200 / 64 = 18, down to a power of two
  EXPECT_LT(measured, 4 * 1200 / 4);
  EXPECT_EQ(weights + hand_outs.unmeasured(), 4 * 1200);
  t = kSecond;
  feed(fetches, 4 * 1200, 1200, t);
  EXPECT_EQ(fetches.period(), 1u);  // every batch below 2,000 a second
  hand_outs.reset();
  t = kSecond;
  feed(hand_outs, 4 * 1200, 1200, t);
  EXPECT_EQ(hand_outs.period(), 16u);  // a reset keeps both rates
  feed(hand_outs, 3 * 400, 400, t);
  EXPECT_EQ(hand_outs.period(), 1u);  // below its rate: every batch
}

TEST(BatchSampler, AFastStreamIsSampledAndItsCountStaysExact) {
  BatchSampler s(11);
  int64_t t = kSecond;
  const int64_t n = 800'000;  // ten seconds at 80,000 batches/s
  auto [measured, weights] = feed(s, n, 80'000, t);
  EXPECT_EQ(s.period(), kFastPeriod);
  // The first window (0.1 s) is measured in full, then about 80,000 / period a second.
  const int64_t per_second = 80'000 / kFastPeriod;
  EXPECT_GT(measured, 8'000 + 9 * per_second * 8 / 10);
  EXPECT_LT(measured, 8'000 + 9 * per_second * 12 / 10);
  EXPECT_EQ(weights + s.unmeasured(), n);  // every batch is counted by some event or the tail
  EXPECT_EQ(s.take_unmeasured() + weights, n);
  EXPECT_EQ(s.unmeasured(), 0u);
}

TEST(BatchSampler, ASlowedStreamIsMeasuredAgainWithinTheGap) {
  BatchSampler s(3);
  int64_t t = kSecond;
  feed(s, 400'000, 80'000, t);
  ASSERT_EQ(s.period(), kFastPeriod);
  // Down to 10 batches/s: the next batch is 100 ms later, past the gap allowed unmeasured.
  for (int i = 0; i < 20; ++i) {
    t += kSecond / 10;
    EXPECT_TRUE(s.take(t)) << i;
  }
  EXPECT_EQ(s.period(), 1u);
}

TEST(BatchSampler, APauseIsNotASlowerStream) {
  // A fast stream stops for 150 ms right as a window begins (a full garbage collection of a
  // big heap, the process preempted): that window closes on one batch in 150 ms.
  BatchSampler s(29);
  int64_t t = kSecond;
  feed(s, 400'000, 80'000, t);  // 50 windows of 8,000 batches: the next batch closes one
  ASSERT_EQ(s.period(), kFastPeriod);
  s.take(t);
  t += kSecond * 15 / 100;
  // The 100 ms after the pause: sampled at half the period at most, not measured in full.
  auto [measured, weights] = feed(s, 8'000, 80'000, t);
  EXPECT_EQ(s.period(), kFastPeriod / 2);
  EXPECT_LT(measured, 2 * 8'000 * 2 / kFastPeriod);
  feed(s, 1, 80'000, t);  // closes that window: the stream's own period again
  EXPECT_EQ(s.period(), kFastPeriod);
  // A stream that slows down evenly is measured in full from the next window on.
  feed(s, 8'000, 80'000, t);
  feed(s, 41, 400, t);
  EXPECT_EQ(s.period(), 1u);
}

TEST(BatchSampler, ARandomSampleDoesNotLineUpWithAPeriodicJob) {
  // Every 64th batch is slow (the job does something every 64 batches): a stride of 64 (or a
  // multiple) would see all of them or none; a random sample sees its share.
  BatchSampler s(5);
  int64_t t = kSecond;
  double true_sum = 0, sampled_sum = 0;
  for (int64_t i = 0; i < 2'000'000; ++i) {
    const double cost = i % 64 == 0 ? 1000.0 : 1.0;
    true_sum += cost;
    if (s.take(t)) sampled_sum += cost * s.weight();
    t += kSecond / 80'000;
  }
  EXPECT_EQ(s.period(), kFastPeriod);
  EXPECT_NEAR(sampled_sum / true_sum, 1.0, 0.1);
}

TEST(BatchSampler, AForcedBatchStandsForItselfAlone) {
  BatchSampler s(9);
  int64_t t = kSecond;
  feed(s, 200'000, 80'000, t);
  ASSERT_GT(s.period(), 1u);
  s.take_unmeasured();
  int64_t weights = 0, forced = 0;
  for (int i = 0; i < 10'000; ++i) {
    const bool force = i % 100 == 50;  // a profiled fetch now and then
    const uint32_t before = s.unmeasured();
    if (s.take(t, force)) {
      weights += s.weight();
      if (force && s.weight() == 1 && s.unmeasured() == before) ++forced;
    }
    t += kSecond / 80'000;
  }
  EXPECT_GT(forced, 50);  // most forced ones were outside the sample
  EXPECT_EQ(weights + s.unmeasured(), 10'000);
}

TEST(BatchSampler, ADecisionMadeAheadIsRecordedWhenTheBatchComes) {
  BatchSampler s(13);
  int64_t t = kSecond;
  int64_t weights = 0;
  bool next = true;
  for (int i = 0; i < 100'000; ++i) {
    if (s.record(next, false, t)) weights += s.weight();
    t += kSecond / 80'000;
    next = s.decide(t);  // at this batch's hand-out, for the next one
  }
  EXPECT_EQ(s.period(), kFastPeriod);
  EXPECT_EQ(weights + s.unmeasured(), 100'000);  // the last decision's batch never came
}

namespace {

/// What feed() does, decided a run at a time as a single-process loop's lane does: after each
/// measured batch plan() says how many go unmeasured, counted with one skipped(n) when the
/// run ends. Returns {measured, sum of weights}; `longest`: the longest run.
std::pair<int64_t, int64_t> feed_runs(BatchSampler& s, int64_t n, int64_t per_second, int64_t& t,
                                      int64_t* longest = nullptr) {
  const int64_t step = kSecond / per_second;
  int64_t measured = 0, weights = 0;
  for (int64_t i = 0; i < n;) {
    s.record(true, false, t);
    ++measured;
    weights += s.weight();
    ++i;
    t += step;
    if (i == n) break;
    const int64_t run = std::min<int64_t>(s.plan(t), n - i);
    if (longest != nullptr) *longest = std::max(*longest, run);
    s.skipped(uint32_t(run));
    i += run;
    t += run * step;
  }
  return {measured, weights};
}

}  // namespace

TEST(BatchSampler, ARunAtATimeIsTheSameSampleAsABatchAtATime) {
  BatchSampler each(11), runs(11);
  int64_t t1 = kSecond, t2 = kSecond;
  const int64_t n = 800'000;  // ten seconds at 80,000 batches/s
  auto [measured, weights] = feed(each, n, 80'000, t1);
  auto [measured_runs, weights_runs] = feed_runs(runs, n, 80'000, t2);
  EXPECT_EQ(runs.period(), kFastPeriod);
  EXPECT_NEAR(double(measured_runs) / double(measured), 1.0, 0.1);
  EXPECT_EQ(weights_runs + runs.unmeasured(), n);  // every batch counted, the tail included
  EXPECT_EQ(weights + each.unmeasured(), n);
}

TEST(BatchSampler, ANormalLoaderPlansNoRun) {
  BatchSampler s(7);
  int64_t t = kSecond;
  auto [measured, weights] = feed_runs(s, 800, 400, t);
  EXPECT_EQ(measured, 800);
  EXPECT_EQ(weights, 800);
  EXPECT_EQ(s.plan(t), 0u);
}

TEST(BatchSampler, ARunLastsAtMostTheGapAllowedUnmeasured) {
  using dldoctor::trace::kMaxUnmeasuredNs;
  for (const int64_t rate : {80'000, 1'000'000}) {
    BatchSampler s(29);
    int64_t t = kSecond, longest = 0;
    feed_runs(s, rate * 5, rate, t, &longest);  // five seconds
    EXPECT_LE(longest, rate * kMaxUnmeasuredNs / kSecond) << rate;
    EXPECT_LT(longest, int64_t(dldoctor::trace::kMaxWeight)) << rate;
    EXPECT_GT(longest, int64_t(s.period())) << rate;  // a geometric gap, not a fixed stride
  }
}

TEST(BatchSampler, RandomRunsDoNotLineUpWithAPeriodicJob) {
  BatchSampler s(5);
  int64_t t = kSecond;
  double true_sum = 0, sampled_sum = 0;
  int64_t i = 0;
  const int64_t n = 2'000'000, step = kSecond / 80'000;
  auto cost = [](int64_t k) { return k % 64 == 0 ? 1000.0 : 1.0; };
  for (int64_t k = 0; k < n; ++k) true_sum += cost(k);
  while (i < n) {
    s.record(true, false, t);
    sampled_sum += cost(i) * s.weight();
    ++i;
    t += step;
    const int64_t run = std::min<int64_t>(s.plan(t), n - i);
    s.skipped(uint32_t(run));
    i += run;
    t += run * step;
  }
  EXPECT_EQ(s.period(), kFastPeriod);
  EXPECT_NEAR(sampled_sum / true_sum, 1.0, 0.1);
}

TEST(BatchSampler, WeightsFitAnEventAndAResumedStreamStartsSampled) {
  BatchSampler s(17);
  int64_t t = kSecond;
  uint32_t heaviest = 0;
  for (int i = 0; i < 12'000'000; ++i) {  // 40 M/s for 0.3 s: the period and weight caps hold
    if (s.take(t)) heaviest = std::max(heaviest, s.weight());
    t += 25;
  }
  EXPECT_EQ(s.period(), dldoctor::trace::kMaxSamplePeriod);
  EXPECT_LE(heaviest, dldoctor::trace::kMaxWeight);
  BatchSampler resumed(19);
  resumed.resume(64);
  EXPECT_EQ(resumed.period(), 64u);
  resumed.resume(100);
  EXPECT_EQ(resumed.period(), 64u);  // a power of two
}

// -- Slow fetches among the others (SlowFetchDetector) --------------------------------------
TEST(SlowFetchDetector, FlagsFetchesFarAboveTheMeanOnly) {
  dldoctor::trace::SlowFetchDetector d;
  uint64_t n = 0;
  for (int i = 0; i < 7; ++i) EXPECT_FALSE(d.observe(50'000'000, ++n));  // no cut before 8
  EXPECT_FALSE(d.observe(3'000'000, ++n));
  d.reset();
  n = 0;
  for (int i = 0; i < 100; ++i) EXPECT_FALSE(d.observe(1'000'000, ++n));  // 1 ms fetches
  EXPECT_EQ(d.mean_ns(), 1'000'000);
  EXPECT_EQ(d.cut_ns(), dldoctor::trace::kSlowFetchMinNs);  // 5 x 1 ms is under the floor
  EXPECT_FALSE(d.observe(9'000'000, ++n));
  EXPECT_TRUE(d.observe(11'000'000, ++n));
  // Past the warm-up the mean follows every 16th fetch, 1/16 of the way each time.
  for (int i = 0; i < 2000; ++i) EXPECT_FALSE(d.observe(4'000'000, ++n));
  EXPECT_GT(d.cut_ns(), 15'000'000);
  EXPECT_FALSE(d.observe(11'000'000, ++n));
}

TEST(SlowFetchDetector, ReportsAtMostItsRecordBudget) {
  dldoctor::trace::SlowFetchDetector d;
  uint64_t n = 0;
  for (int i = 0; i < 64; ++i) d.observe(1'000'000, ++n);
  int reported = 0;
  for (int i = 0; i < 1000; ++i) reported += d.observe(100'000'000, ++n);
  EXPECT_EQ(reported, dldoctor::trace::kSlowFetchMaxRecords);
}

// -- The vocabulary the binding exports ----------------------------------------------------------
TEST(EventVocabulary, NamesAreUniqueAndCoverEveryKind) {
  std::set<std::string> names;
  for (const auto& e : dldoctor::trace::kEventKindNames) EXPECT_TRUE(names.insert(e.name).second);
  EXPECT_EQ(names.size(), dldoctor::trace::kLastEventKind);
  uint8_t all_flags = 0;
  for (const auto& e : dldoctor::trace::kLoaderFlagNames) all_flags |= uint8_t(e.value);
  EXPECT_EQ(all_flags, 0x3f);
  Event e;
  EXPECT_EQ(dldoctor::trace::batches_of(e), 1);  // weight 0: the event alone
  e.weight = 64;
  EXPECT_EQ(dldoctor::trace::batches_of(e), 64);
}
