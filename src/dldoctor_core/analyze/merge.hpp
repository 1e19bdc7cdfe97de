// Several nodes' reports as one job (`dldoctor report node0.json node1.json ...`): each node
// ran its own `dldoctor run -- torchrun ...` and decided its own findings. The job's view is
// decided here, once: the nodes' order (the one holding the slowest rank first), the order
// of every node's findings in the job, the job's verdict, the slowest rank and node, and each
// node's budgets over all its ranks. Python reads the reports and renders what this decides.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze {

/// One loader of a node's report, as the merge reads it (the JSON's loader fields).
struct NodeLoader {
  std::optional<int> rank;
  std::optional<int> main_pid;
  std::optional<double> batches_per_s;
  std::optional<double> data_stall_pct;
  int num_workers = 0;
  std::optional<int> prefetch_factor;
  std::optional<double> batch_bytes;
};

/// One node's decided report.
struct NodeReport {
  std::string name;
  std::string verdict;  ///< "healthy", "unknown" or a finding id
  /// In the node's decided order (its most important first); id and severity are what the
  /// merge reads.
  std::vector<report::Finding> findings;
  std::vector<NodeLoader> loaders;
  std::optional<double> usable_cpus;
  std::optional<int64_t> shm_free_bytes, shm_total_bytes;
};

/// A node's budgets over all its ranks, at once: the ranks' main processes and workers
/// against its CPUs, each rank's batches in flight against its /dev/shm.
struct NodeBudgets {
  int main_processes = 0;  ///< ranks (main processes) seen among its loaders
  /// Workers of every rank: each rank's largest loader (a rank's loaders take turns).
  int workers = 0;
  std::optional<double> usable_cpus;
  /// Bytes in flight of every rank: (num_workers x prefetch_factor + 1) batches of each
  /// rank's largest loader, summed; empty when no loader with workers has known batch bytes.
  std::optional<double> shm_in_flight_bytes;
  std::optional<int64_t> shm_free_bytes;  ///< free at the start, else its size
};

/// One node of the merged job.
struct MergedNode {
  size_t index = 0;        ///< into the input
  int slowest_loader = -1;  ///< index into its loaders, -1 none
  std::vector<int> ranks;   ///< ranks of its loaders, ascending
  NodeBudgets budgets;
};

/// Where a finding of the job comes from.
struct MergedFinding {
  size_t node = 0;     ///< input index of its node
  size_t finding = 0;  ///< index into that node's findings
};

struct MergedJob {
  std::vector<MergedNode> nodes;        ///< the node with the slowest rank first
  std::vector<MergedFinding> findings;  ///< the job's order
  /// The id of the job's first critical finding; else "healthy" when every node is healthy,
  /// "unknown" when one is not known (a node without evidence is not a healthy one).
  std::string verdict;
  /// The slowest rank's node (input index) and loader, -1 when no node has a loader.
  int slowest_node = -1;
  int slowest_loader = -1;
};

/// How a merged job orders its findings: by severity, then the node holding the slower rank
/// first, each node's own order kept (a node's order already holds its tiers and scores; a
/// score means a share of that node's own stall, so scores are never compared across nodes).
MergedJob merge_nodes(const std::vector<NodeReport>& nodes);

}  // namespace dldoctor::analyze
