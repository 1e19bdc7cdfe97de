// Glue of analyze::merge_nodes: several nodes' report dicts in, the job's decided order and
// verdict out (indices into what came in: Python keeps the dicts and renders them).
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>

#include <string>
#include <vector>

#include "analyze_convert.hpp"
#include "dldoctor_core/analyze/merge.hpp"
#include "optional.hpp"
#include "register.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {

namespace {

analyze::NodeReport node_from_dict(nb::handle d, size_t i) {
  const std::string w = "node report " + std::to_string(i);
  require_dict(d, w);
  analyze::NodeReport n;
  n.name = read_str(d, "name", w);
  n.verdict = read<std::string>(d, "verdict", w).value_or("unknown");
  for (nb::handle f : read_list(d, "findings", w)) n.findings.push_back(finding_from_dict(f));
  const std::string lw = w + " loader";
  for (nb::handle l : read_list(d, "loaders", w)) {
    require_dict(l, lw);
    analyze::NodeLoader x;
    x.rank = read<int>(l, "rank", lw);
    if (!x.rank) x.rank = read<int>(l, "local_rank", lw);
    x.main_pid = read<int>(l, "main_pid", lw);
    x.batches_per_s = read<double>(l, "batches_per_s", lw);
    x.data_stall_pct = read<double>(l, "data_stall_pct", lw);
    x.num_workers = read<int>(l, "num_workers", lw).value_or(0);
    x.prefetch_factor = read<int>(l, "prefetch_factor", lw);
    x.batch_bytes = read<double>(l, "batch_bytes", lw);
    n.loaders.push_back(x);
  }
  const nb::handle sys = field(d, "system");
  if (sys.is_valid()) {
    n.usable_cpus = read<double>(sys, "usable_cpus", w + " system");
    n.shm_free_bytes = read<int64_t>(sys, "shm_free_bytes", w + " system");
    n.shm_total_bytes = read<int64_t>(sys, "shm_total_bytes", w + " system");
  }
  return n;
}

nb::dict merged_to_dict(const analyze::MergedJob& j) {
  nb::dict d;
  d["verdict"] = j.verdict;
  nb::list nodes;
  for (const analyze::MergedNode& m : j.nodes) {
    nb::dict n;
    n["index"] = m.index;
    n["slowest_loader"] = m.slowest_loader >= 0 ? nb::cast(m.slowest_loader) : nb::none();
    nb::list ranks;
    for (int r : m.ranks) ranks.append(r);
    n["ranks"] = ranks;
    n["main_processes"] = m.budgets.main_processes;
    n["workers"] = m.budgets.workers;
    n["usable_cpus"] = opt(m.budgets.usable_cpus);
    n["shm_in_flight_bytes"] = opt(m.budgets.shm_in_flight_bytes);
    n["shm_free_bytes"] = opt(m.budgets.shm_free_bytes);
    nodes.append(n);
  }
  d["nodes"] = nodes;
  nb::list findings;
  for (const analyze::MergedFinding& f : j.findings) findings.append(nb::make_tuple(f.node, f.finding));
  d["findings"] = findings;
  d["slowest"] = j.slowest_node >= 0 ? nb::object(nb::make_tuple(j.slowest_node, j.slowest_loader))
                                     : nb::none();
  return d;
}

}  // namespace

void register_merge(nb::module_& m) {
  m.def(
      "merge_nodes",
      [](nb::list reports) {
        std::vector<analyze::NodeReport> nodes;
        size_t i = 0;
        for (nb::handle r : reports) nodes.push_back(node_from_dict(r, i++));
        return merged_to_dict(analyze::merge_nodes(nodes));
      },
      nb::arg("reports"),
      "Several nodes' reports ({name, verdict, findings, loaders, system}) as one job: "
      "{verdict, nodes: [{index, slowest_loader, ranks, main_processes, workers, usable_cpus, "
      "shm_in_flight_bytes, shm_free_bytes}] slowest first, findings: [(node, finding)] in the "
      "job's order, slowest: (node, loader) or None}.");
}

}  // namespace dldoctor::ext
