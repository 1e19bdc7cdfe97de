// slow_collate (seed cause 2, in collate_fn): as slow_getitem, but most of the fetch is
// spent merging samples into a batch. Fix: more workers while CPUs are idle, else a
// collate_fn that does less per batch.
#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {

namespace {

std::string cheaper_collate_advice(const LoaderView& l) {
  std::string s =
      "make collate_fn cheaper: move per-sample work (decoding, augmenting, padding, "
      "converting to tensors) out of collate_fn into __getitem__, stack tensors with "
      "torch.stack instead of Python loops over samples, or return ready batches from the "
      "dataset (__getitems__ or a batch sampler) so collate only passes them through";
  if (!l.config.custom_collate())
    s += "; the default collate is slow on many small objects: return one tensor per "
         "sample, not nested lists or dicts of numbers";
  return s + ".";
}

}  // namespace

void rule_slow_collate(const JobView& job, std::vector<report::Finding>& out) {
  const auto over = oversubscription(job);
  const bool oversubscribed = over && over->proven;
  for (const LoaderView& l : job.loaders) {
    auto s = shortfall(l);
    if (!s) continue;
    if (s->busy && *s->busy < kCpuBoundFraction) continue;  // io_bound's
    if (!l.collate_share || *l.collate_share < kCollateShare) continue;  // slow_getitem's
    const FetchCapacity& c = s->capacity;
    const double stall = *l.data_stall_fraction;
    const double share = *l.collate_share;

    report::Finding f;
    f.id = "slow_collate";
    f.severity = (oversubscribed || !s->busy) ? report::Severity::kWarning
                                              : report::Severity::kCritical;
    f.loader = l.loader;
    f.score = stall * share;
    f.title = "Loader " + std::to_string(l.loader) + ": collate_fn takes " + num(share * 100) +
              "% of each fetch and the workers cannot keep up (" + num(c.capacity_bps) +
              " batches/s, the loop wants " + num(c.demand_bps) + ")";
    add_fetch_evidence(f, job, l, *s);
    f.add("collate_share", share);

    const int needed = workers_for(c.demand_bps, c.fetch_s);
    const auto ceiling = cpu_worker_ceiling(job, l);
    const int now = l.config.num_workers;
    if (ceiling && *ceiling > now && !oversubscribed) {
      const int n = needed <= *ceiling ? needed : *ceiling;
      f.add("recommended_num_workers", double(n));
      f.fix = "Set num_workers=" + std::to_string(n) + " (now " + std::to_string(now) + ")" +
              (needed <= *ceiling
                   ? ": " + std::to_string(n) + " workers supply " + num(n / c.fetch_s) +
                         " batches/s, above the loop's " + num(c.demand_bps) + "; then " +
                         cheaper_collate_advice(l)
                   : ", all the idle CPUs allow, and " + cheaper_collate_advice(l));
    } else {
      f.fix = no_cpu_for_more_workers(job) +
              cheaper_collate_advice(l);
    }
    f.why = "The main process waits " + num(stall * 100) +
            "% of the loop for batches; the workers are busy on CPU for " +
            (s->busy ? num(*s->busy * 100) + "%" : std::string("an unmeasured share")) +
            " of each fetch, and " + num(share * 100) +
            "% of the fetch is collate_fn, which runs once per batch in the worker: "
            "shortening it shortens every batch.";
    out.push_back(std::move(f));
  }
}

}  // namespace dldoctor::analyze
