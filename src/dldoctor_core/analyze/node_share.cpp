// Grouping is by main pid first: Lightning's first rank may report its rank only once the
// process group is up, but its loaders keep one main pid either way.
#include "dldoctor_core/analyze/node_share.hpp"

#include <algorithm>

#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze {

std::string RankShare::name() const {
  if (rank >= 0) return "rank " + std::to_string(rank);
  if (main_pid > 0) return "process " + std::to_string(main_pid);
  return "the job";
}

std::vector<RankShare> rank_shares(const JobView& job) {
  std::vector<RankShare> out;
  for (const LoaderView& l : job.loaders) {
    const int rank = l.rank.known() ? l.rank.shown() : -1;
    const int pid = l.config.main_pid;
    // One main process: the same pid (a loader made before the process group was up has no
    // rank yet), or the same rank; loaders with neither are one unknown process.
    auto it = std::find_if(out.begin(), out.end(), [&](const RankShare& s) {
      if (pid > 0 && s.main_pid == pid) return true;
      if (rank >= 0) return s.rank == rank;
      return pid <= 0 && s.main_pid <= 0 && s.rank < 0;
    });
    if (it == out.end()) {
      out.push_back(RankShare{rank, pid, {}});
      it = out.end() - 1;
    }
    if (it->main_pid <= 0) it->main_pid = pid;
    if (it->rank < 0) it->rank = rank;
    it->loaders.push_back(&l);
  }
  // Ranks ascending, as the report lists its loaders (their ids follow the order the ranks
  // happened to make them); main processes without a rank after, as they came.
  std::stable_sort(out.begin(), out.end(), [](const RankShare& a, const RankShare& b) {
    if ((a.rank < 0) != (b.rank < 0)) return b.rank < 0;
    return a.rank >= 0 && a.rank < b.rank;
  });
  return out;
}

std::string shares_text(const std::vector<std::pair<std::string, double>>& shares) {
  std::string s;
  for (const auto& [name, bytes] : shares)
    s += (s.empty() ? "" : ", ") + name + ": " + bytes_text(bytes);
  return s;
}

std::optional<size_t> share_of_pid(const std::vector<RankShare>& shares, int pid) {
  if (pid <= 0) return std::nullopt;
  for (size_t i = 0; i < shares.size(); ++i) {
    if (shares[i].main_pid == pid) return i;
    for (const LoaderView* l : shares[i].loaders)
      if (std::find(l->worker_pids.begin(), l->worker_pids.end(), pid) != l->worker_pids.end())
        return i;
  }
  return std::nullopt;
}

std::vector<std::pair<std::string, int64_t>> peak_per_share(const std::vector<RankShare>& shares,
                                                            std::optional<int64_t> ProcAgg::*field) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const RankShare& r : shares) {
    std::optional<int64_t> sum;
    bool main_counted = false;
    for (const LoaderView* l : r.loaders) {
      if (!main_counted && l->main.*field) {
        sum = sum.value_or(0) + *(l->main.*field);
        main_counted = true;
      }
      if (l->config.num_workers > 0 && l->fetchers.*field)
        sum = sum.value_or(0) + *(l->fetchers.*field);
    }
    if (sum) out.emplace_back(r.name(), *sum);
  }
  if (out.size() < 2) out.clear();
  return out;
}

}  // namespace dldoctor::analyze
