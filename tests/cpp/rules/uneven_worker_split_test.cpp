// uneven_worker_split at the edges of its thresholds: the workers' time without data against
// kMinIdleShare, a loop that keeps up, an epoch whose workers run out together; and what the
// fetch rules beside it say once the split is uneven (no more workers, capacity of the ones
// with data).
#include "dldoctor_core/analyze/rules/uneven_worker_split.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

trace::Event drained(const Loader& l, int worker, int64_t t, int64_t batches) {
  return event(trace::EventKind::kWorkerDrained, l.worker_pid(worker), t, l.id, worker, -1, 0,
               batches, 1);
}

Loader iterable(Loader l) {
  l.flags |= trace::kIterableDataset;
  return l;
}

struct Split {
  Session s;
  int64_t end = 0;
  std::vector<report::Finding> whole;
};

/// 20 s of `l`; each of `outs` (worker, seconds after the start) runs out of data then: the
/// batches asked for after it come after its event, as in the ring.
std::unique_ptr<Split> run_split(const Loader& l, std::vector<std::pair<int, double>> outs,
                                 std::optional<double> usable = 8) {
  auto r = std::make_unique<Split>();
  r->s.set_facts(facts(usable));
  std::sort(outs.begin(), outs.end(), [](auto& a, auto& b) { return a.second < b.second; });
  double from = 0;
  bool started = false;  // the iterator's start comes first, even before a worker at 0 s
  for (auto [w, at] : outs) {
    if (!started || at > from)
      r->end = feed(r->s, l, kT0 + int64_t(from * kS), at - from, !started);
    started = true;
    r->s.ingest(drained(l, w, kT0 + int64_t(at * kS), int64_t(at * 5)));
    from = std::max(from, at);
  }
  r->end = feed(r->s, l, kT0 + int64_t(from * kS), 20 - from, !started);
  feed_passes(r->s, kT0, 20, procs(l, 30.0, 95.0, 1.0, 3.0), {});
  r->whole = r->s.findings(0, Window::kWholeRun);
  return r;
}

TEST(AnalyzeUnevenWorkerSplit, AWorkerWithoutDataComesFirstAndNoWorkersAreAdded) {
  Loader l = iterable(cpu_bound(2));
  auto r = run_split(l, {{1, 0.0}});
  ASSERT_EQ(Session::verdict(r->whole), "uneven_worker_split");
  const report::Finding& f = r->whole[0];
  EXPECT_EQ(f.severity, report::Severity::kCritical);
  EXPECT_NEAR(*num(f, "idle_worker_share"), 0.5, 0.01);
  EXPECT_NEAR(*num(f, "active_workers"), 1.0, 0.02);
  EXPECT_EQ(*num(f, "workers_ran_out"), 1);
  EXPECT_EQ(*num(f, "workers_without_data"), 1);
  EXPECT_NE(text(f, "ran_out")->find("worker 1 after 0 batches"), std::string::npos);
  EXPECT_NE(f.fix.find("multiple of num_workers"), std::string::npos) << f.fix;
  // The fetch rule beside it: the capacity of the one worker with data, and no num_workers.
  const report::Finding* g = find(r->whole, "slow_getitem");
  ASSERT_NE(g, nullptr);
  EXPECT_NEAR(*num(*g, "worker_capacity_batches_per_s"), 10, 0.5);
  EXPECT_FALSE(num(*g, "recommended_num_workers"));
  EXPECT_NE(g->fix.find("uneven_worker_split"), std::string::npos) << g->fix;
  EXPECT_NE(g->title.find("1 with data"), std::string::npos) << g->title;
}

TEST(AnalyzeUnevenWorkerSplit, EdgesOfTheShortHandedWait) {
  Loader l = iterable(cpu_bound(2));
  // The loop waits evenly: half its waits after the worker ran out is half the run.
  auto above = run_split(l, {{1, 9.5}});
  const report::Finding* f = find(above->whole, "uneven_worker_split");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(*num(*f, "short_handed_wait_share"), 0.525, 0.01);
  auto below = run_split(l, {{1, 10.5}});
  EXPECT_EQ(find(below->whole, "uneven_worker_split"), nullptr);
  // Below the cut the fetch rule sizes the workers as it would without the split.
  const report::Finding* g = find(below->whole, "slow_getitem");
  ASSERT_NE(g, nullptr);
  EXPECT_TRUE(num(*g, "recommended_num_workers"));
}

TEST(AnalyzeUnevenWorkerSplit, EdgesOfTheIdleShare) {
  Loader l = iterable(cpu_bound(8));
  l.fetch_ms = 400;  // 8 workers supply 20 batches/s, the loop wants 50
  // After 8 s, 12 s of one worker of eight is 7.5% of their time; of two, 15%.
  auto one = run_split(l, {{7, 8.0}});
  EXPECT_EQ(find(one->whole, "uneven_worker_split"), nullptr);
  auto two = run_split(l, {{6, 8.0}, {7, 8.0}});
  const report::Finding* f = find(two->whole, "uneven_worker_split");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(*num(*f, "idle_worker_share"), 0.15, 0.01);
  EXPECT_EQ(*num(*f, "workers_ran_out"), 2);
}

TEST(AnalyzeUnevenWorkerSplit, QuietWhileTheLoopKeepsUp) {
  Loader l = iterable(cpu_bound(2));
  l.fetch_ms = 10;  // 2 workers x 100 batches/s, the loop wants 50: one worker is enough
  auto r = run_split(l, {{1, 0.0}});
  EXPECT_EQ(find(r->whole, "uneven_worker_split"), nullptr);
  EXPECT_EQ(Session::verdict(r->whole), "healthy");
}

TEST(AnalyzeUnevenWorkerSplit, WorkersThatRunOutTogetherAtTheEndAreEven) {
  Loader l = iterable(cpu_bound(4));
  auto r = run_split(l, {{0, 19.6}, {1, 19.7}, {2, 19.8}, {3, 19.9}});
  EXPECT_EQ(find(r->whole, "uneven_worker_split"), nullptr);
  const report::Finding* g = find(r->whole, "slow_getitem");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(g->title.find("with data"), std::string::npos) << g->title;
}

TEST(AnalyzeUnevenWorkerSplit, TheRecentWindowSeesAWorkerThatRanOutBeforeIt) {
  Loader l = iterable(cpu_bound(2));
  auto r = run_split(l, {{1, 1.0}});
  // The last 10 s: the worker ran out before the window, and idled through all of it.
  auto recent = r->s.findings(r->end, Window::kRecent);
  const report::Finding* f = find(recent, "uneven_worker_split");
  ASSERT_NE(f, nullptr);
  EXPECT_NEAR(*num(*f, "idle_worker_share"), 0.5, 0.01);
}

}  // namespace
}  // namespace dldoctor::analyze
