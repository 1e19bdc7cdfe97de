// The pace of a rank is its loader's: in synchronous data-parallel training the ranks share one
// pace and the one that gates it waits the longest for its own batches (the others wait in the
// collectives instead), so the highest data stall is the slowest rank, then the fewest
// batches per second.
#include "dldoctor_core/analyze/merge.hpp"

#include <algorithm>
#include <limits>
#include <map>

namespace dldoctor::analyze {

namespace {

/// Smaller is slower: (-stall, batches/s), unknown figures last.
std::pair<double, double> pace(const NodeLoader* l) {
  constexpr double kInf = std::numeric_limits<double>::infinity();
  if (l == nullptr) return {kInf, kInf};
  return {l->data_stall_pct ? -*l->data_stall_pct : kInf, l->batches_per_s.value_or(kInf)};
}

NodeBudgets budgets_of(const NodeReport& n) {
  NodeBudgets b;
  b.usable_cpus = n.usable_cpus;
  b.shm_free_bytes = n.shm_free_bytes ? n.shm_free_bytes : n.shm_total_bytes;
  // A rank is a main process: its rank when known, else its pid, else one for all.
  std::map<int64_t, std::pair<int, std::optional<double>>> per_rank;  // workers, bytes
  for (const NodeLoader& l : n.loaders) {
    const int64_t key = l.rank ? int64_t(*l.rank) : l.main_pid ? -int64_t(*l.main_pid) - 1 : -1;
    auto& [workers, bytes] = per_rank[key];
    workers = std::max(workers, l.num_workers);
    if (l.num_workers > 0 && l.batch_bytes && *l.batch_bytes > 0) {
      const int prefetch = l.prefetch_factor.value_or(2);  // torch's default
      const double held = *l.batch_bytes * double(l.num_workers * prefetch + 1);
      bytes = std::max(bytes.value_or(0), held);
    }
  }
  b.main_processes = int(per_rank.size());
  for (const auto& [key, r] : per_rank) {
    b.workers += r.first;
    if (r.second) b.shm_in_flight_bytes = b.shm_in_flight_bytes.value_or(0) + *r.second;
  }
  return b;
}

}  // namespace

MergedJob merge_nodes(const std::vector<NodeReport>& nodes) {
  MergedJob job;
  for (size_t i = 0; i < nodes.size(); ++i) {
    MergedNode m;
    m.index = i;
    const NodeReport& n = nodes[i];
    for (size_t j = 0; j < n.loaders.size(); ++j) {
      if (m.slowest_loader < 0 ||
          pace(&n.loaders[j]) < pace(&n.loaders[size_t(m.slowest_loader)]))
        m.slowest_loader = int(j);
      if (const auto& r = n.loaders[j].rank;
          r && std::find(m.ranks.begin(), m.ranks.end(), *r) == m.ranks.end())
        m.ranks.push_back(*r);
    }
    std::sort(m.ranks.begin(), m.ranks.end());
    m.budgets = budgets_of(n);
    job.nodes.push_back(std::move(m));
  }
  auto slowest = [&](const MergedNode& m) {
    return pace(m.slowest_loader < 0 ? nullptr
                                     : &nodes[m.index].loaders[size_t(m.slowest_loader)]);
  };
  std::stable_sort(job.nodes.begin(), job.nodes.end(),
                   [&](const MergedNode& a, const MergedNode& b) { return slowest(a) < slowest(b); });
  if (!job.nodes.empty() && job.nodes.front().slowest_loader >= 0) {
    job.slowest_node = int(job.nodes.front().index);
    job.slowest_loader = job.nodes.front().slowest_loader;
  }

  // Merge the nodes' decided lists: the most severe head first, the slower node's on a tie.
  std::vector<size_t> next(nodes.size(), 0);
  for (;;) {
    const MergedNode* best = nullptr;
    for (const MergedNode& m : job.nodes) {
      const auto& fs = nodes[m.index].findings;
      if (next[m.index] >= fs.size()) continue;
      if (!best || fs[next[m.index]].severity >
                       nodes[best->index].findings[next[best->index]].severity)
        best = &m;
    }
    if (!best) break;
    job.findings.push_back({best->index, next[best->index]++});
  }

  job.verdict = "healthy";
  for (const MergedFinding& f : job.findings) {
    const report::Finding& x = nodes[f.node].findings[f.finding];
    if (x.severity == report::Severity::kCritical) {
      job.verdict = x.id;
      return job;
    }
  }
  // No critical finding in the nodes' lists: a node's own critical verdict still stands (a
  // report whose findings were cut), and a node not known keeps the job unknown.
  for (const MergedNode& m : job.nodes) {
    const std::string& v = nodes[m.index].verdict;
    if (v != "healthy" && v != "unknown") {
      job.verdict = v;
      return job;
    }
  }
  for (const NodeReport& n : nodes)
    if (n.verdict == "unknown") job.verdict = "unknown";
  if (nodes.empty()) job.verdict = "unknown";
  return job;
}

}  // namespace dldoctor::analyze
