// slow_getitem (seed cause 2): the loop waits, the workers compute for most of each fetch,
// and at their count they cannot supply what the consumer asks for; most of the fetch is
// the dataset's __getitem__. Fix: more workers while CPUs are idle, else a cheaper
// __getitem__ (the hot step named when profiles are known).
#include <cmath>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {

namespace {

std::string cheaper_getitem_advice(const LoaderView& l) {
  if (const HotFunction* h = hottest_step(l.hot_functions)) {
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

void rule_slow_getitem(const JobView& job, std::vector<report::Finding>& out) {
  const auto over = oversubscription(job);
  const bool oversubscribed = over && over->proven;
  for (const LoaderView& l : job.loaders) {
    auto s = shortfall(l);
    if (!s) continue;
    if (s->busy && *s->busy < kCpuBoundFraction) continue;  // io_bound's
    const double collate = l.collate_share.value_or(0);
    if (collate >= kCollateShare) continue;  // slow_collate's
    const FetchCapacity& c = s->capacity;
    const double stall = *l.data_stall_fraction;

    report::Finding f;
    f.id = "slow_getitem";
    // Proven oversubscription is the first thing to fix (too_many_workers); the heavy
    // __getitem__ is then a partial cause. Unmeasured CPU time lowers confidence the same way.
    f.severity = (oversubscribed || !s->busy) ? report::Severity::kWarning
                                              : report::Severity::kCritical;
    f.loader = l.loader;
    f.score = stall * (1.0 - collate);
    f.title = "Loader " + std::to_string(l.loader) + ": __getitem__ is too slow for the loop (" +
              (c.serial ? std::string("the main process supplies ")
                        : count_of(c.fetch_processes, "worker") +
                              (c.fetch_processes == 1 ? " supplies " : " supply ")) +
              num(c.capacity_bps) + " batches/s, the loop wants " + num(c.demand_bps) + ")";
    add_fetch_evidence(f, job, l, *s);
    if (!l.hot_functions.empty()) f.add("hot_functions", hot_functions_text(l.hot_functions));

    const int needed = workers_for(c.demand_bps, c.fetch_s);
    const auto ceiling = cpu_worker_ceiling(job, l);
    const int now = l.config.num_workers;
    if (ceiling && *ceiling > now && !oversubscribed) {
      if (needed <= *ceiling) {
        f.add("recommended_num_workers", double(needed));
        f.fix = "Set num_workers=" + std::to_string(needed) + " (now " + std::to_string(now) +
                "): " + std::to_string(needed) + " workers at " + num(c.fetch_s * 1e3) +
                " ms per batch supply " + num(needed / c.fetch_s) +
                " batches/s, above the loop's " + num(c.demand_bps) + ", and " +
                count_of(*ceiling - now, "CPU") + (*ceiling - now == 1 ? " is" : " are") +
                " idle.";
      } else {
        f.add("recommended_num_workers", double(*ceiling));
        f.fix = "Set num_workers=" + std::to_string(*ceiling) + " (now " + std::to_string(now) +
                "), all the idle CPUs allow (" + std::to_string(needed) +
                " would be needed), and " + cheaper_getitem_advice(l);
      }
    } else {
      f.fix = no_cpu_for_more_workers(job) + cheaper_getitem_advice(l);
    }
    f.why = "The main process waits " + num(stall * 100) +
            "% of the loop for batches while the workers " +
            (s->busy ? "are busy on a CPU (running or queued for one) for " +
                           num(*s->busy * 100) + "% of each fetch"
                     : std::string("fetch without a break (their CPU time was not measured)")) +
            ", " + num((1.0 - collate) * 100) +
            "% of it in __getitem__: the loader is limited by the CPU cost of preparing "
            "samples, so it speeds up only with more CPUs working on it or less work per "
            "sample.";
    if (oversubscribed)
      f.why += " The workers already outnumber the usable CPUs (see too_many_workers), so "
               "the cost per sample is what is left to cut.";
    out.push_back(std::move(f));
  }
}

}  // namespace dldoctor::analyze
