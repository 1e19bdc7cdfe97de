// More workers only while a CPU is idle for them; otherwise the cost per sample is what is
// left to cut, and the profiles say where it goes.
#include "dldoctor_core/analyze/rules/slow_getitem.hpp"

#include "dldoctor_core/analyze/rules/too_many_workers.hpp"

namespace dldoctor::analyze::slow_getitem {

namespace {

/// The id this file's findings carry.
constexpr char kId[] = "slow_getitem";

std::string cheaper_getitem_advice(const std::vector<HotFunction>& hot) {
  if (const HotFunction* h = hottest_step(hot)) {
    std::string where = h->name + (h->location.empty() ? "" : " (" + h->location + ")");
    return "make __getitem__ cheaper where it spends its time, in " + where + ": " +
           hot_step_advice(h->name) + ".";
  }
  return "make __getitem__ cheaper: move its heaviest step offline (e.g. decode and resize "
         "the images once and save them at training size), or use a faster library for it "
         "(Pillow-SIMD; PIL Image.draft() to decode JPEGs at reduced size; "
         "torchvision.io.decode_jpeg, nvJPEG on the GPU). Profile it to find that step.";
}

}  // namespace

std::vector<Side> split(const JobView& job, bool collate) {
  const auto over = oversubscription(job);
  std::vector<Side> out;
  for (CpuBoundFetch& c : cpu_bound_fetches(job, over && over->proven)) {
    const double share = c.collate_share.value_or(0);
    if ((share >= kCollateShare) != collate) continue;  // the other rule's
    const double score = c.figures.data_stall_fraction * (collate ? share : 1.0 - share);
    out.push_back({{c.severity(), report::Tier::kMeasure, score}, std::move(c), share});
  }
  return out;
}

report::Finding head(const char* id, const Side& e, const std::string& title_tail) {
  const FetchFigures& x = e.fetch.figures;
  report::Finding f = report::make_finding(id, x.loader, e.rank);
  f.title = "Loader " + std::to_string(x.loader) + ": " + title_tail;
  add_fetch_evidence(f, x);
  return f;
}

std::vector<Evidence> detect(const JobView& job) {
  std::vector<Evidence> out;
  for (Side& s : split(job, false)) out.push_back({std::move(s)});
  return out;
}

report::Finding finding(const Evidence& e) {
  const FetchFigures& x = e.fetch.figures;
  const std::optional<double>& busy = x.shortfall.busy;
  report::Finding f =
      head(kId, e, "__getitem__ is too slow for the loop (" + supply_text(x) + ")");
  if (!e.fetch.hot_functions.empty())
    f.add("hot_functions", hot_functions_text(e.fetch.hot_functions));

  const int needed = e.fetch.needed_workers;
  const std::string now = " (now " + std::to_string(x.num_workers) + ")";
  if (auto n = e.fetch.recommended_workers()) {
    f.add("recommended_num_workers", double(*n));
    const std::string room = x.budget ? " (" + cpu_budget_text(*x.budget) + ")" : "";
    f.fix = "Set num_workers=" + std::to_string(*n) + now +
            (*n == needed
                 ? ": " + supply_of(*n, x) + ", and the measured CPU has room for them" + room +
                       "."
                 : ", all the measured CPU allows" + room + " (" + std::to_string(needed) +
                       " would be needed), and " + cheaper_getitem_advice(e.fetch.hot_functions));
  } else {
    f.fix = no_more_workers(e.fetch) + cheaper_getitem_advice(e.fetch.hot_functions);
  }
  f.why = "The main process waits " + num(x.data_stall_fraction * 100) +
          "% of the loop for batches while the workers " +
          (busy ? "are busy on a CPU (running or queued for one) for " + num(*busy * 100) +
                      "% of each fetch"
                : std::string("fetch without a break (their CPU time was not measured)")) +
          (x.shortfall.capacity ? std::string()
                                : std::string(" and are almost never idle waiting for an index")) +
          ", " + num((1.0 - e.collate_share) * 100) +
          "% of it in __getitem__: the loader is limited by the CPU cost of preparing "
          "samples, so it speeds up only with more CPUs working on it or less work per "
          "sample.";
  if (e.fetch.oversubscribed)
    f.why +=
        " The workers already outnumber the usable CPUs (see too_many_workers), so "
        "the cost per sample is what is left to cut.";
  return f;
}

}  // namespace dldoctor::analyze::slow_getitem
