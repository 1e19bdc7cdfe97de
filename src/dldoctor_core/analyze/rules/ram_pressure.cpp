// Low memory reclaims the page cache the dataset reads from, then swaps, then kills.
#include "dldoctor_core/analyze/rules/ram_pressure.hpp"

#include "dldoctor_core/analyze/node_share.hpp"
#include "dldoctor_core/analyze/rules/pinned_memory_pressure.hpp"

namespace dldoctor::analyze::ram_pressure {

std::vector<std::pair<std::string, double>> rss_per_rank(const JobView& job) {
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [name, rss] : peak_per_share(rank_shares(job), &ProcAgg::rss_peak_sum))
    out.emplace_back(name, double(rss));
  return out;
}

std::optional<Evidence> detect(const JobView& job) {
  const Memory m = memory_of(job);
  if (!m.short_of_memory()) return std::nullopt;
  if (auto p = pinned_memory_pressure::pinned(job, m); p && p->matters())
    return std::nullopt;  // pinned_memory_pressure's
  return Evidence{memory_rank(m, job), m, rss_per_rank(job)};
}

report::Finding finding(const Evidence& e) {
  report::Finding f = report::make_finding("ram_pressure", -1, e.rank);
  add_memory_evidence(f, e.memory);
  f.title = "Memory is short (" + short_sentence(e.memory) + ")";
  if (!e.rss_per_rank.empty()) {
    f.add("ranks", double(e.rss_per_rank.size()));
    f.add("rss_per_rank", shares_text(e.rss_per_rank));
  }
  f.fix =
      "Find what holds the memory (the workers: see their RSS in the report; a "
      "dataset held in Python lists or dicts grows in every worker, see "
      "cow_memory_growth). Use fewer workers or a smaller prefetch_factor, keep the "
      "dataset's index in numpy arrays, or give the job more memory (docker run "
      "--memory, Kubernetes resources.limits.memory).";
  f.why =
      "When MemAvailable or the cgroup's headroom runs low the kernel reclaims the page "
      "cache the dataset reads from and swaps, so reads go to storage and steps stall; "
      "at the limit the OOM killer kills the largest process, usually a worker." +
      (e.rss_per_rank.empty()
           ? std::string()
           : " Every rank's main process and workers live in this node's one RAM; each "
             "rank's resident memory at its peak (main process and workers): " +
                 shares_text(e.rss_per_rank) + ".");
  return f;
}

}  // namespace dldoctor::analyze::ram_pressure
