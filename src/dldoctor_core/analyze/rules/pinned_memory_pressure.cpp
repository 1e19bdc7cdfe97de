// Pinned (page-locked) memory is neither swappable nor reclaimable: when memory runs short
// the rest of the job is pushed out instead.
#include "dldoctor_core/analyze/rules/pinned_memory_pressure.hpp"

#include <algorithm>

#include "dldoctor_core/analyze/node_share.hpp"
#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::pinned_memory_pressure {

std::optional<Unused> detect_unused(const JobView& job) {
  // pin_memory=True without an accelerator: torch skips pinning (and warns once).
  for (const RuntimeNote& r : job.failures.runtime)
    if (r.pin_memory_requested && *r.pin_memory_requested && r.accelerator && !*r.accelerator)
      return Unused{r.loader};  // one is enough for the job
  return std::nullopt;
}

report::Finding finding(const Unused& e) {
  report::Finding f = report::make_finding("pinned_memory_pressure", e.loader, report::Rank{});
  f.title = "pin_memory=True does nothing on this machine: there is no CUDA device";
  f.add("pin_memory", std::string("requested, not in effect"));
  f.add("accelerator", std::string("none"));
  f.fix =
      "Nothing to do for speed here; pin_memory=True only helps host-to-GPU copies "
      "(tensor.to('cuda', non_blocking=True)). Keep it for the GPU machines, or set it "
      "from torch.cuda.is_available().";
  f.why =
      "Pinned (page-locked) memory lets the GPU copy a batch by DMA while the CPU goes "
      "on. Without an accelerator torch skips pinning, so the flag costs and buys "
      "nothing.";
  return f;
}

std::optional<Pinned> pinned(const JobView& job, const Memory& m) {
  Pinned p;
  double measured = 0;
  bool all_measured = true;
  for (const LoaderView& l : job.loaders) {
    if (!l.config.pin_memory()) continue;
    ++p.loaders;
    if (!p.largest || l.batch_bytes_mean.value_or(0) > p.largest->batch_bytes_mean.value_or(0))
      p.largest = &l;
    if (!l.batch_bytes_mean) {
      all_measured = false;
      continue;
    }
    const int queued =
        l.config.num_workers > 0
            ? l.config.num_workers * l.config.prefetch_factor.value_or(kDefaultPrefetchFactor)
            : 0;
    p.bytes_estimate =
        p.bytes_estimate.value_or(0) + *l.batch_bytes_mean * double(queued + kPinnedHeldBatches);
    // num_workers=0 pins in the main process, one batch at a time.
    const int64_t ready = l.config.num_workers > 0 ? l.ready_batches_max.value_or(-1) : 0;
    if (ready < 0) {
      all_measured = false;
      continue;
    }
    measured += *l.batch_bytes_mean * double(ready + kPinnedHeldBatches);
    p.batches_in_flight = p.batches_in_flight.value_or(0) + ready + kPinnedHeldBatches;
  }
  if (p.loaders == 0) return std::nullopt;
  if (all_measured && p.batches_in_flight) p.bytes_in_flight = measured;
  // Each rank's part: its pinned loaders' measured bytes, else their configuration's bound.
  for (const RankShare& r : rank_shares(job)) {
    double bytes = 0;
    bool pins = false;
    for (const LoaderView* l : r.loaders) {
      if (!l->config.pin_memory() || !l->batch_bytes_mean) continue;
      pins = true;
      const int64_t ready = l->config.num_workers > 0 ? l->ready_batches_max.value_or(-1) : 0;
      const int queued =
          l->config.num_workers > 0
              ? l->config.num_workers * l->config.prefetch_factor.value_or(kDefaultPrefetchFactor)
              : 0;
      const int64_t held = p.bytes_in_flight && ready >= 0 ? ready : queued;
      bytes += *l->batch_bytes_mean * double(held + kPinnedHeldBatches);
    }
    if (pins) p.per_rank.emplace_back(r.name(), bytes);
  }
  if (p.per_rank.size() < 2) p.per_rank.clear();
  const std::optional<int64_t> room = m.cgroup_limit ? m.cgroup_limit : m.total_bytes;
  const std::optional<double> bytes = p.bytes_in_flight ? p.bytes_in_flight : p.bytes_estimate;
  if (room && *room > 0 && bytes) p.share = *bytes / double(*room);
  return p;
}

std::optional<Evidence> detect(const JobView& job) {
  const Memory m = memory_of(job);
  if (!m.short_of_memory()) return std::nullopt;
  const std::optional<Pinned> p = pinned(job, m);
  if (!p || !p->matters()) return std::nullopt;  // ram_pressure's
  const LoaderView& l = *p->largest;
  Evidence e;
  e.rank = memory_rank(m, job);
  e.memory = m;
  e.pinned_loaders = p->loaders;
  e.loader = p->loaders == 1 ? l.loader : -1;
  e.pinned_bytes = p->bytes_estimate;
  e.pinned_bytes_in_flight = p->bytes_in_flight;
  e.pinned_batches_in_flight = p->batches_in_flight;
  e.pinned_share = p->share;
  e.batch_bytes = l.batch_bytes_mean;
  e.num_workers = l.config.num_workers;
  e.prefetch_factor = l.config.prefetch_factor;
  e.per_rank = p->per_rank;
  return e;
}

report::Finding finding(const Evidence& e) {
  report::Finding f = report::make_finding("pinned_memory_pressure", e.loader, e.rank);
  add_memory_evidence(f, e.memory);
  f.title =
      "Memory is short (" + short_sentence(e.memory) + ") and pin_memory=True locks batches in RAM";
  if (e.pinned_bytes_in_flight) f.add("pinned_bytes_in_flight", *e.pinned_bytes_in_flight);
  if (e.pinned_batches_in_flight)
    f.add("pinned_batches_in_flight", double(*e.pinned_batches_in_flight));
  if (e.pinned_bytes) f.add("pinned_bytes_estimate", *e.pinned_bytes);
  if (e.pinned_share) f.add("pinned_share_of_memory", *e.pinned_share);
  if (e.batch_bytes) f.add("batch_bytes", *e.batch_bytes);
  f.add("num_workers", double(e.num_workers));
  if (e.prefetch_factor) f.add("prefetch_factor", double(*e.prefetch_factor));
  if (!e.per_rank.empty()) {
    f.add("ranks", double(e.per_rank.size()));
    f.add("pinned_bytes_per_rank", shares_text(e.per_rank));
  }
  f.fix = "Set pin_memory=False" +
          std::string(e.pinned_loaders == 1 ? "" : " on the largest loaders") +
          " (the copy to the GPU then costs a little more, but the memory can be reclaimed), "
          "or keep fewer batches pinned: prefetch_factor=1" +
          (e.num_workers > 1 ? ", num_workers=" + std::to_string(std::max(1, e.num_workers / 2))
                             : std::string()) +
          ". Or give the job more memory (docker run --memory, Kubernetes "
          "resources.limits.memory).";
  f.why =
      "With pin_memory=True the main process copies every batch into page-locked "
      "memory, which the kernel can neither swap nor reclaim; " +
      (e.pinned_bytes_in_flight
           ? "up to " + bytes_text(*e.pinned_bytes_in_flight) + " (" +
                 std::to_string(*e.pinned_batches_in_flight) +
                 (*e.pinned_batches_in_flight == 1 ? " batch" : " batches") +
                 " finished and not yet taken, the one in use included) was pinned at once"
           : "about " +
                 (e.pinned_bytes ? bytes_text(*e.pinned_bytes) : std::string("a batch per slot")) +
                 " stays pinned with the batches in flight") +
      (e.pinned_share ? ", " + num(*e.pinned_share * 100) + "% of the memory the job may use"
                      : std::string()) +
      (e.per_rank.empty() ? std::string()
                          : " (every rank pins its own batches in the node's one RAM: " +
                                shares_text(e.per_rank) + ")") +
      ", and torch's caching host allocator keeps those blocks for reuse. When memory is "
      "short the rest of the job (page cache, the workers) is pushed out instead, and steps "
      "stall on swap and reclaim.";
  return f;
}

}  // namespace dldoctor::analyze::pinned_memory_pressure
