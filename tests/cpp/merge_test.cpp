// analyze::merge_nodes: several nodes' decided reports as one job. The node holding the
// slowest rank (the highest data stall, then the fewest batches/s) comes first; findings are
// merged by severity, the slower node's first on a tie, each node's own order kept; the verdict
// is the job's first critical finding; each node's budgets are summed over its ranks.
#include "dldoctor_core/analyze/merge.hpp"

#include <gtest/gtest.h>

namespace dldoctor::analyze {
namespace {

report::Finding finding(std::string id, report::Severity s) {
  report::Finding f;
  f.id = std::move(id);
  f.severity = s;
  return f;
}

NodeLoader loader(int rank, double stall_pct, double bps) {
  NodeLoader l;
  l.rank = rank;
  l.data_stall_pct = stall_pct;
  l.batches_per_s = bps;
  l.num_workers = 2;
  l.prefetch_factor = 3;
  l.batch_bytes = double(2 << 20);
  return l;
}

constexpr auto kCritical = report::Severity::kCritical;
constexpr auto kWarning = report::Severity::kWarning;
constexpr auto kInfo = report::Severity::kInfo;

TEST(Merge, TheSlowestRanksNodeLeadsAndItsCauseIsTheVerdict) {
  NodeReport a{"node0", "healthy", {finding("main_process_bound", kInfo)},
               {loader(0, 2, 9.1), loader(1, 3, 9.0)}, 8.0, std::nullopt, int64_t(1) << 30};
  NodeReport b{"node1",
               "slow_getitem",
               {finding("slow_getitem", kCritical), finding("straggler_rank", kCritical)},
               {loader(2, 4, 9.0), loader(3, 71, 9.0)},
               8.0,
               std::nullopt,
               int64_t(1) << 30};
  const MergedJob j = merge_nodes({a, b});
  ASSERT_EQ(j.nodes.size(), 2u);
  EXPECT_EQ(j.nodes[0].index, 1u);
  EXPECT_EQ(j.nodes[0].slowest_loader, 1);
  EXPECT_EQ(j.nodes[0].ranks, (std::vector<int>{2, 3}));
  EXPECT_EQ(j.slowest_node, 1);
  EXPECT_EQ(j.slowest_loader, 1);
  EXPECT_EQ(j.verdict, "slow_getitem");
  ASSERT_EQ(j.findings.size(), 3u);
  EXPECT_EQ(j.findings[0].node, 1u);
  EXPECT_EQ(j.findings[0].finding, 0u);
  EXPECT_EQ(j.findings[1].finding, 1u);
  EXPECT_EQ(j.findings[2].node, 0u);
  // Each node's ranks at once: two main processes, 2 workers each, 7 x 2 MiB in flight each.
  EXPECT_EQ(j.nodes[0].budgets.main_processes, 2);
  EXPECT_EQ(j.nodes[0].budgets.workers, 4);
  EXPECT_EQ(*j.nodes[0].budgets.shm_in_flight_bytes, double(28 << 20));
  EXPECT_EQ(*j.nodes[0].budgets.shm_free_bytes, int64_t(1) << 30);  // its size: free unknown
}

TEST(Merge, AFailureOnAFasterNodeOutranksTheSlowNodesWarnings) {
  // node0 holds the slowest rank but only warns; node1 failed: the job's verdict is node1's
  // failure, and its critical finding leads the list (severity before the nodes' pace).
  NodeReport slow{"node0", "healthy", {finding("thread_oversubscription", kWarning)},
                  {loader(0, 60, 3.0)}, 4.0, std::nullopt, std::nullopt};
  NodeReport failed{"node1", "shm_exhausted",
                    {finding("worker_died", kWarning), finding("shm_exhausted", kCritical)},
                    {loader(1, 5, 3.0)}, 4.0, int64_t(24) << 20, int64_t(24) << 20};
  // A node's own order is kept even where it looks out of severity order (as stored).
  const MergedJob j = merge_nodes({slow, failed});
  EXPECT_EQ(j.nodes[0].index, 0u);
  EXPECT_EQ(j.verdict, "shm_exhausted");
  ASSERT_EQ(j.findings.size(), 3u);
  EXPECT_EQ(j.findings[0].node, 0u);  // the heads are two warnings: the slower node's first
  EXPECT_EQ(j.findings[1].node, 1u);
  EXPECT_EQ(j.findings[1].finding, 0u);
  EXPECT_EQ(j.findings[2].finding, 1u);

  failed.findings = {finding("shm_exhausted", kCritical), finding("worker_died", kWarning)};
  const MergedJob k = merge_nodes({slow, failed});
  EXPECT_EQ(k.findings[0].node, 1u);  // critical first, whichever node
  EXPECT_EQ(k.findings[1].node, 0u);
  EXPECT_EQ(k.verdict, "shm_exhausted");
}

TEST(Merge, HealthyOnlyWhenEveryNodeIsKnownHealthy) {
  NodeReport a{"a", "healthy", {}, {loader(0, 1, 10)}, std::nullopt, std::nullopt, std::nullopt};
  NodeReport b = a;
  b.name = "b";
  EXPECT_EQ(merge_nodes({a, b}).verdict, "healthy");
  b.verdict = "unknown";  // too short to judge, or no loader seen
  b.loaders.clear();
  const MergedJob j = merge_nodes({a, b});
  EXPECT_EQ(j.verdict, "unknown");
  EXPECT_EQ(j.nodes.back().index, 1u);  // a node without a loader has no pace: last
  EXPECT_EQ(j.nodes.back().slowest_loader, -1);
  EXPECT_EQ(merge_nodes({}).verdict, "unknown");
}

TEST(Merge, BudgetsCountARanksLargestLoaderAndEveryRank) {
  NodeLoader train = loader(0, 5, 10), val = loader(0, 1, 20), other = loader(1, 5, 10);
  val.num_workers = 4;          // rank 0's validation loader: more workers, turns with train
  val.batch_bytes = 1 << 20;    // 9 x 1 MiB: less than train's 14 MiB
  NodeLoader serial = loader(2, 5, 10);
  serial.num_workers = 0;       // no batches in /dev/shm
  NodeReport n{"n", "healthy", {}, {train, val, other, serial}, 16.0, std::nullopt, std::nullopt};
  const NodeBudgets b = merge_nodes({n}).nodes[0].budgets;
  EXPECT_EQ(b.main_processes, 3);
  EXPECT_EQ(b.workers, 4 + 2 + 0);
  EXPECT_EQ(*b.shm_in_flight_bytes, double(28 << 20));
  EXPECT_EQ(b.usable_cpus, std::optional<double>(16.0));
}

}  // namespace
}  // namespace dldoctor::analyze
