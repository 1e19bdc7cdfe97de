// The node-wide budgets of a multi-rank job (issue 12 item 2): /dev/shm, pinned memory, RAM
// and descriptors are held by every rank's main process and workers at once. Two ranks that
// each fit alone and together do not are found, and the finding names each rank's share; a
// rank's own loaders take turns, so within a rank only its largest counts. RLIMIT_NOFILE is
// per process: the descriptors are judged per process of every rank, and summed per rank
// only to say where they are.
#include <gtest/gtest.h>

#include "analyze_sim.hpp"
#include "dldoctor_core/analyze/node_share.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

/// Rank `rank`'s loader: its own main process and workers, loader id rank + 1.
Loader rank_loader(int rank) {
  Loader l;
  l.id = uint16_t(rank + 1);
  l.main_pid = 1000 + 100 * rank;
  l.worker_pid0 = 2000 + 100 * rank;
  return l;
}

RankId rank_id(int rank) { return RankId{rank, rank, 2, 2, 0}; }

/// 20 s of each of `loaders` (1 MiB batches: 2 workers x prefetch 2 + 1 = 5 MiB each in
/// flight), the loader with index i in rank `ranks[i]` (-1: no rank noted).
std::unique_ptr<Session> node(const std::vector<Loader>& loaders, const std::vector<int>& ranks,
                              const system::Facts& f) {
  auto s = std::make_unique<Session>();
  s->set_facts(f);
  for (size_t i = 0; i < loaders.size(); ++i) {
    if (ranks[i] >= 0) s->note_rank(loaders[i].id, rank_id(ranks[i]));
    feed(*s, loaders[i], kT0, 20);
  }
  return s;
}

system::Facts shm(int64_t free) {
  system::Facts f = facts(8);
  f.shm.free_bytes = free;
  f.shm.total_bytes = free;
  return f;
}

TEST(NodeBudget, RankSharesGroupLoadersByRankElseByMainProcess) {
  Loader a = rank_loader(0), b = rank_loader(1), val = rank_loader(0);
  val.id = 3;  // rank 0's validation loader: the same main process
  auto s = node({a, b, val}, {0, 1, 0}, facts(8));
  const JobView v = s->view(0, Window::kWholeRun);
  const std::vector<RankShare> shares = rank_shares(v);
  ASSERT_EQ(shares.size(), 2u);
  EXPECT_EQ(shares[0].name(), "rank 0");
  EXPECT_EQ(shares[0].loaders.size(), 2u);
  EXPECT_EQ(shares[1].name(), "rank 1");
  EXPECT_EQ(share_of_pid(shares, b.worker_pid(1)), std::optional<size_t>(1));
  EXPECT_EQ(share_of_pid(shares, 4242), std::nullopt);
  // Ranks ascending whichever made its loader first (loader ids follow creation order).
  Loader late0 = rank_loader(0), early1 = rank_loader(1);
  late0.id = 2, early1.id = 1;
  auto swapped = node({early1, late0}, {1, 0}, facts(8));
  const std::vector<RankShare> by_rank = rank_shares(swapped->view(0, Window::kWholeRun));
  ASSERT_EQ(by_rank.size(), 2u);
  EXPECT_EQ(by_rank[0].name(), "rank 0");
  EXPECT_EQ(by_rank[1].name(), "rank 1");
  // Without ranks, two main processes are still two shares of the node; one is one.
  auto plain = node({a, b}, {-1, -1}, facts(8));
  const std::vector<RankShare> p = rank_shares(plain->view(0, Window::kWholeRun));
  ASSERT_EQ(p.size(), 2u);
  EXPECT_EQ(p[1].name(), "process 1100");
  EXPECT_EQ(rank_shares(node({a}, {-1}, facts(8))->view(0, Window::kWholeRun)).size(), 1u);
}

// 5 MiB each in flight. 12 MiB free: either rank alone has its 2x margin (10 MiB); both
// together (10 MiB) fit, with too little margin.
TEST(NodeBudget, ShmTwoRanksThatEachFitAloneShareTheMargin) {
  const Loader a = rank_loader(0), b = rank_loader(1);
  EXPECT_EQ(find(whole(*node({a}, {0}, shm(12 * kMiB))), "shm_exhausted"), nullptr);
  EXPECT_EQ(find(whole(*node({b}, {1}, shm(12 * kMiB))), "shm_exhausted"), nullptr);
  auto fs = whole(*node({a, b}, {0, 1}, shm(12 * kMiB)));
  const report::Finding* f = find(fs, "shm_exhausted");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, report::Severity::kWarning);
  EXPECT_EQ(*num(*f, "in_flight_bytes"), double(10 * kMiB));
  EXPECT_EQ(*num(*f, "batches_in_flight"), 10.0);
  EXPECT_EQ(*num(*f, "ranks"), 2.0);
  EXPECT_EQ(*text(*f, "rank_in_flight_bytes"), "rank 0: 5 MiB, rank 1: 5 MiB");
  EXPECT_EQ(*num(*f, "shm_size_needed_bytes"), double(20 * kMiB));
  EXPECT_EQ(f->loader, -1);  // the node's finding, not one rank's
  EXPECT_EQ(f->rank, -1);
  EXPECT_NE(f->title.find("of rank 0 and rank 1 (10 MiB)"), std::string::npos) << f->title;
  EXPECT_NE(f->why.find("rank 0: 5 MiB, rank 1: 5 MiB: 10 MiB together"), std::string::npos)
      << f->why;
  // 6 MiB of room: prefetch 1 in both ranks is 2 x 3 MiB.
  EXPECT_EQ(*text(*f, "fits_today"), "prefetch_factor=1 in each rank's loader");
}

// 8 MiB free: each rank alone fits (5 MiB), both (10 MiB) do not.
TEST(NodeBudget, ShmTwoRanksTogetherOverflowWhatEitherFitsAlone) {
  const Loader a = rank_loader(0), b = rank_loader(1);
  auto alone = whole(*node({a}, {0}, shm(8 * kMiB)));
  ASSERT_NE(find(alone, "shm_exhausted"), nullptr);
  EXPECT_NE(find(alone, "shm_exhausted")->title.find("little margin"), std::string::npos);
  auto fs = whole(*node({a, b}, {0, 1}, shm(8 * kMiB)));
  const report::Finding* f = find(fs, "shm_exhausted");
  ASSERT_NE(f, nullptr);
  EXPECT_NE(f->title.find("will not fit"), std::string::npos) << f->title;
  // 4 MiB of room: one worker and prefetch 1 in each rank is 2 x 2 MiB.
  EXPECT_EQ(*text(*f, "fits_today"), "num_workers=1, prefetch_factor=1 in each rank's loader");
  // The failure, when it comes, is the node's too: critical, sized from both ranks.
  auto s = node({a, b}, {0, 1}, shm(8 * kMiB));
  ErrorNote e = error("unable to write to file </torch_18692_1954506624>: No space left on "
                      "device (28)");
  e.loader = b.id;
  s->note(e);
  auto failed = whole(*s);
  ASSERT_FALSE(failed.empty());
  EXPECT_EQ(failed[0].id, "shm_exhausted");
  EXPECT_EQ(failed[0].severity, report::Severity::kCritical);
  EXPECT_EQ(*num(failed[0], "in_flight_bytes"), double(10 * kMiB));
  EXPECT_EQ(*text(failed[0], "rank_in_flight_bytes"), "rank 0: 5 MiB, rank 1: 5 MiB");
}

TEST(NodeBudget, ShmARanksOwnLoadersTakeTurns) {
  // Rank 0's train and validation loaders are iterated one at a time: 5 MiB, not 10.
  Loader train = rank_loader(0), val = rank_loader(0);
  val.id = 3;
  EXPECT_EQ(find(whole(*node({train, val}, {0, 0}, shm(10 * kMiB))), "shm_exhausted"), nullptr);
  // A second rank's loader is held at the same time.
  const Loader other = rank_loader(1);
  auto fs = whole(*node({train, val, other}, {0, 0, 1}, shm(10 * kMiB)));
  ASSERT_NE(find(fs, "shm_exhausted"), nullptr);
  EXPECT_EQ(*num(*find(fs, "shm_exhausted"), "in_flight_bytes"), double(10 * kMiB));
}

// --- pinned memory and RAM ------------------------------------------------------------------

/// Rank `rank`'s pin_memory loader, its workers 4 batches ahead of a 50 ms step for 20 s,
/// batches of `batch_bytes`: 5 batches pinned at once.
void pinned_rank(Session& s, int rank, int64_t batch_bytes) {
  Loader l = rank_loader(rank);
  l.flags |= trace::kPinMemory;
  s.note_rank(l.id, rank_id(rank));
  s.ingest(event(trace::EventKind::kIterStart, l.main_pid, kT0, l.id, l.num_workers,
                 l.prefetch_factor, uint32_t(l.batch_size), 0, l.main_pid, 1, 0, l.flags));
  auto worker_batch = [&](int i, int64_t t) {
    s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(i % 2), t - 30 * kMs, l.id, i % 2,
                   i, 32, 30 * kMs, kMs, 28 * kMs, batch_bytes));
  };
  for (int i = 0; i < 4; ++i) worker_batch(i, kT0 + 50 * kMs);
  for (int i = 0; i < 400; ++i) {
    const int64_t t = kT0 + 100 * kMs + i * 50 * kMs;
    worker_batch(i + 4, t);
    s.ingest(event(trace::EventKind::kMainBatch, l.main_pid, t, l.id, i % 2, i, 0, 0,
                   i == 0 ? -1 : 50 * kMs, 2 * kMs));
  }
}

/// Passes of rank r's processes (main `main_rss`, each worker `worker_rss`, `fds` each) on a
/// machine with 50 MiB available.
void node_passes(Session& s, const std::vector<int>& ranks, int64_t main_rss, int64_t worker_rss,
                 std::vector<int64_t> worker_fds = {}) {
  for (int64_t t = kT0; t < kT0 + 20 * kS; t += 100 * kMs) {
    sample::Snapshot snap;
    snap.t_ns = t;
    snap.machine.mem_available_bytes = 50 * kMiB;
    for (int r : ranks) {
      const Loader l = rank_loader(r);
      for (int w = -1; w < l.num_workers; ++w) {
        sample::ProcessSample p;
        p.pid = w < 0 ? l.main_pid : l.worker_pid(w);
        p.ppid = w < 0 ? 1 : l.main_pid;
        p.state = 'S';
        p.comm = "python";
        p.num_threads = 1;
        p.cpu_pct = 10.0;
        p.rss_bytes = (w < 0 ? main_rss : worker_rss) + r * kMiB;
        p.open_fds = w < 0 ? 20 : worker_fds.empty() ? 20 : worker_fds[size_t(r)];
        snap.processes.push_back(p);
      }
    }
    s.ingest(snap);
  }
}

// 5 batches of 6 MiB pinned per rank: 3% of the 1000 MiB each, under kPinnedMinShare (5%)
// alone, 6% together.
TEST(NodeBudget, PinnedBatchesOfTwoRanksTogetherAreWhyMemoryIsShort) {
  auto alone = std::make_unique<Session>();
  alone->set_facts(memory_facts(1000 * kMiB));
  pinned_rank(*alone, 0, 6 * kMiB);
  node_passes(*alone, {0}, 100 * kMiB, 100 * kMiB);
  EXPECT_EQ(ids(whole(*alone)), std::vector<std::string>{"ram_pressure"});

  auto both = std::make_unique<Session>();
  both->set_facts(memory_facts(1000 * kMiB));
  pinned_rank(*both, 0, 6 * kMiB);
  pinned_rank(*both, 1, 6 * kMiB);
  node_passes(*both, {0, 1}, 100 * kMiB, 100 * kMiB);
  auto fs = whole(*both);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"pinned_memory_pressure"});
  const report::Finding& f = fs[0];
  EXPECT_NEAR(*num(f, "pinned_share_of_memory"), 0.06, 1e-9);
  EXPECT_EQ(*num(f, "pinned_bytes_in_flight"), double(60 * kMiB));
  EXPECT_EQ(*num(f, "ranks"), 2.0);
  EXPECT_EQ(*text(f, "pinned_bytes_per_rank"), "rank 0: 30 MiB, rank 1: 30 MiB");
  EXPECT_NE(f.why.find("every rank pins its own batches in the node's one RAM: rank 0: 30 MiB"),
            std::string::npos)
      << f.why;
}

TEST(NodeBudget, RamPressureNamesWhatEachRankHolds) {
  auto s = node({rank_loader(0), rank_loader(1)}, {0, 1}, memory_facts(1000 * kMiB));
  // Rank 0: main 100 MiB + 2 workers of 200 MiB; rank 1: 1 MiB more in each of its three.
  node_passes(*s, {0, 1}, 100 * kMiB, 200 * kMiB);
  auto fs = whole(*s);
  const report::Finding* f = find(fs, "ram_pressure");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*num(*f, "ranks"), 2.0);
  EXPECT_EQ(*text(*f, "rss_per_rank"), "rank 0: 500 MiB, rank 1: 503 MiB");
  EXPECT_NE(f->why.find("this node's one RAM"), std::string::npos) << f->why;
  // One main process: nothing to split, the evidence is as before.
  auto one = node({rank_loader(0)}, {0}, memory_facts(1000 * kMiB));
  node_passes(*one, {0}, 100 * kMiB, 200 * kMiB);
  const auto one_fs = whole(*one);
  const report::Finding* g = find(one_fs, "ram_pressure");
  ASSERT_NE(g, nullptr);
  EXPECT_EQ(text(*g, "rss_per_rank"), std::nullopt);
}

TEST(NodeBudget, DescriptorsAreJudgedPerProcessAndSummedPerRank) {
  system::Facts f = facts(8);
  f.limits.nofile_soft = 1024;
  f.limits.nofile_hard = 4096;
  // 600 descriptors in each worker of both ranks: 2400 on the node, each process far from
  // its own limit of 1024 (RLIMIT_NOFILE is per process): no finding.
  auto calm = node({rank_loader(0), rank_loader(1)}, {0, 1}, f);
  node_passes(*calm, {0, 1}, 100 * kMiB, 100 * kMiB, {600, 600});
  EXPECT_EQ(find(whole(*calm), "fd_limit"), nullptr);
  // Rank 1's workers at 900 of 1024: the finding names rank 1's process, and each rank's part.
  auto near = node({rank_loader(0), rank_loader(1)}, {0, 1}, f);
  node_passes(*near, {0, 1}, 100 * kMiB, 100 * kMiB, {600, 900});
  auto fs = whole(*near);
  const report::Finding* x = find(fs, "fd_limit");
  ASSERT_NE(x, nullptr);
  EXPECT_EQ(x->rank, 1);
  EXPECT_EQ(*num(*x, "process_rank"), 1.0);
  EXPECT_EQ(*num(*x, "open_fds_peak"), 900.0);
  EXPECT_EQ(*text(*x, "open_fds_per_rank"), "rank 0: 1220, rank 1: 1820");
  EXPECT_NE(x->title.find("of rank 1"), std::string::npos) << x->title;
}

}  // namespace
}  // namespace dldoctor::analyze
