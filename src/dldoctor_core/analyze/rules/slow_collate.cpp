// collate_fn runs once per batch in the worker: shortening it shortens every batch.
#include "dldoctor_core/analyze/rules/slow_collate.hpp"


namespace dldoctor::analyze::slow_collate {

namespace {

/// The id this file's findings carry.
constexpr char kId[] = "slow_collate";

std::string cheaper_collate_advice(bool custom_collate) {
  std::string s =
      "make collate_fn cheaper: move per-sample work (decoding, augmenting, padding, "
      "converting to tensors) out of collate_fn into __getitem__, stack tensors with "
      "torch.stack instead of Python loops over samples, or return ready batches from the "
      "dataset (__getitems__ or a batch sampler) so collate only passes them through";
  if (!custom_collate)
    s += "; the default collate is slow on many small objects: return one tensor per "
         "sample, not nested lists or dicts of numbers";
  return s + ".";
}

}  // namespace

std::vector<Evidence> detect(const JobView& job) {
  std::vector<Evidence> out;
  for (slow_getitem::Side& s : slow_getitem::split(job, true)) out.push_back({std::move(s)});
  return out;
}

report::Finding finding(const Evidence& e) {
  const FetchFigures& x = e.fetch.figures;
  const std::optional<FetchCapacity>& c = x.shortfall.capacity;
  const std::optional<double>& busy = x.shortfall.busy;
  const double stall = x.data_stall_fraction;
  const double share = e.collate_share;

  report::Finding f = slow_getitem::head(
      kId, e,
      "collate_fn takes " + num(share * 100) + "% of each fetch and the workers cannot keep up (" +
          (c ? num(c->capacity_bps) + " batches/s, the loop wants " + num(c->demand_bps)
             : supply_text(x)) +
          ")");
  f.add("collate_share", share);

  if (auto n = e.fetch.recommended_workers()) {
    f.add("recommended_num_workers", double(*n));
    f.fix = "Set num_workers=" + std::to_string(*n) + " (now " + std::to_string(x.num_workers) +
            ")" +
            (*n == e.fetch.needed_workers
                 ? ": " + supply_of(*n, x) + "; then " +
                       cheaper_collate_advice(e.fetch.custom_collate)
                 : ", all the measured CPU allows" +
                       (x.budget ? " (" + cpu_budget_text(*x.budget) + ")" : std::string()) +
                       ", and " + cheaper_collate_advice(e.fetch.custom_collate));
  } else {
    f.fix = no_more_workers(e.fetch) + cheaper_collate_advice(e.fetch.custom_collate);
  }
  f.why = "The main process waits " + num(stall * 100) +
          "% of the loop for batches; the workers are busy on CPU for " +
          (busy ? num(*busy * 100) + "%" : std::string("an unmeasured share")) +
          " of each fetch, and " + num(share * 100) +
          "% of the fetch is collate_fn, which runs once per batch in the worker: "
          "shortening it shortens every batch.";
  return f;
}

}  // namespace dldoctor::analyze::slow_collate
