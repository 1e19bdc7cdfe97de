// Batches are fetched round-robin but handed out in order: while the loop waits for a slow
// one, the batches after it sit finished in the queue.
#include "dldoctor_core/analyze/rules/straggler_worker.hpp"

#include <algorithm>
#include <cmath>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::straggler_worker {

namespace {
std::string ms(double v) { return num(v) + " ms"; }
}  // namespace

std::vector<Evidence> detect(const JobView& job) {
  std::vector<Evidence> out;
  for (const LoaderView& l : job.loaders) {
    if (l.config.num_workers < 2 || !stalled(l)) continue;
    if (!l.config.in_order()) continue;  // out of order, nothing waits behind a straggler
    if (!l.head_of_line_s || !l.wait_s || l.loop_s <= 0 || !l.fetch_p50_ms || *l.fetch_p50_ms <= 0)
      continue;
    Evidence e;
    e.hol_share = *l.head_of_line_s / l.loop_s;
    if (e.hol_share < kHolShareOfLoop) continue;

    // A slow worker: its median against the other workers'.
    for (const WorkerFetch& w : l.worker_fetch) {
      if (w.batches < kMinWorkerBatches || !w.p50_ms) continue;
      std::vector<double> others;
      for (const WorkerFetch& o : l.worker_fetch)
        if (&o != &w && o.batches >= kMinWorkerBatches && o.p50_ms) others.push_back(*o.p50_ms);
      auto med = quantile(others, 0.5);
      if (!med || *med <= 0) continue;
      const double r = *w.p50_ms / *med;
      if (r >= kSlowWorkerRatio && r > e.worker_ratio) {
        e.worker_ratio = r;
        e.slow_worker = w;
      }
    }
    // Slow batches: the tail against the median.
    const double cut = kSlowBatchRatio * *l.fetch_p50_ms;
    for (const WorkerBatchRecord& r : l.slowest_batches)
      if (double(r.fetch_ns) / 1e6 >= cut) e.slow.push_back(r);
    if (!e.slow_worker && e.slow.empty()) continue;
    for (const SlowBatchNote& n : l.slow_notes) {
      if (double(n.fetch_ns) / 1e6 < cut) continue;
      for (int64_t s : n.samples) e.slow_samples.insert(s);
    }

    e.loader = l.loader;
    e.data_stall_fraction = *l.data_stall_fraction;
    e.head_of_line_s = *l.head_of_line_s;
    e.hol_of_wait = *l.wait_s > 0 ? *l.head_of_line_s / *l.wait_s : 0;
    e.head_of_line_batches = l.head_of_line_batches;
    e.fetch_p50_ms = *l.fetch_p50_ms;
    e.fetch_p99_ms = l.fetch_p99_ms;
    e.fetch_max_ms = l.fetch_max_ms;
    e.worker_fetch = l.worker_fetch;
    e.short_of_demand = shortfall(l).has_value();
    e.rank = {(!e.short_of_demand && e.hol_of_wait >= kHolShareOfWait) ? report::Severity::kCritical
                                                                       : report::Severity::kWarning,
              report::Tier::kMeasure, e.data_stall_fraction * std::min(1.0, e.hol_of_wait)};
    out.push_back(std::move(e));
  }
  return out;
}

report::Finding finding(const Evidence& e) {
  report::Finding f = report::make_finding("straggler_worker", e.loader, e.rank);
  if (e.slow_worker)
    f.title = "Loader " + std::to_string(e.loader) + ": worker " +
              std::to_string(e.slow_worker->worker) + " is " + num(e.worker_ratio) +
              "x slower than the others, and the loop waits for it in order";
  else
    f.title = "Loader " + std::to_string(e.loader) + ": a few batches take " +
              num(double(e.slow.front().fetch_ns) / 1e6 / e.fetch_p50_ms) +
              "x the median, and the loop waits for each of them while later batches are "
              "ready";
  f.add("data_stall_fraction", e.data_stall_fraction);
  f.add("head_of_line_wait_s", e.head_of_line_s);
  f.add("head_of_line_share_of_loop", e.hol_share);
  f.add("head_of_line_share_of_wait", e.hol_of_wait);
  f.add("head_of_line_batches", double(e.head_of_line_batches));
  f.add("fetch_p50_ms", e.fetch_p50_ms);
  if (e.fetch_p99_ms) f.add("fetch_p99_ms", *e.fetch_p99_ms);
  if (e.fetch_max_ms) f.add("fetch_max_ms", *e.fetch_max_ms);
  std::string dist;
  for (const WorkerFetch& w : e.worker_fetch) {
    if (!w.p50_ms) continue;
    dist += (dist.empty() ? "" : "; ") + std::string("worker ") + std::to_string(w.worker) +
            ": p50 " + ms(*w.p50_ms) + ", p90 " + ms(w.p90_ms.value_or(0)) + ", max " +
            ms(w.max_ms.value_or(0)) + " (" + std::to_string(w.batches) + " batches)";
  }
  f.add("batch_ms_per_worker", dist);
  if (e.slow_worker) {
    f.add("slow_worker", double(e.slow_worker->worker));
    f.add("slow_worker_pid", double(e.slow_worker->pid));
    f.add("slow_worker_ratio", e.worker_ratio);
  }
  f.add("slow_batches", double(e.slow.size()));

  // The slow batches, with their samples when the worker reported them.
  std::string listed;
  for (size_t i = 0; i < e.slow.size() && i < 6; ++i) {
    const WorkerBatchRecord& r = e.slow[i];
    listed += (listed.empty() ? "" : "; ") + std::string("batch ") + std::to_string(r.index) +
              " (worker " + std::to_string(r.worker) + ", " + ms(double(r.fetch_ns) / 1e6) + ")";
  }
  if (!listed.empty()) f.add("slowest_batches", listed);
  std::string sample_text;
  int shown = 0;
  for (int64_t s : e.slow_samples) {
    if (shown++ == 24) {
      sample_text += ", ...";
      break;
    }
    sample_text += (sample_text.empty() ? "" : ", ") + std::to_string(s);
  }
  if (!sample_text.empty()) f.add("slow_sample_indices", sample_text);

  std::string fix =
      "Set in_order=False on the DataLoader (torch >= 2.6): batches are then handed out as "
      "they are ready, so a slow one no longer holds back the " +
      num(double(e.head_of_line_batches)) +
      " waits seen behind it (the order of batches "
      "within an epoch changes; fine for shuffled training).";
  if (e.slow_worker)
    fix += " Then find why worker " + std::to_string(e.slow_worker->worker) +
           " is slower: with an IterableDataset its shard may be larger or on slower "
           "storage; rebalance the shards.";
  else
    fix += " Then make the slow samples cheaper" +
           (sample_text.empty() ? std::string() : " (dataset indices " + sample_text + ")") +
           ": precompute their expensive part offline, or, when their cost grows with their "
           "size (long sequences, large images), bucket samples of similar size into the "
           "same batches.";
  f.fix = std::move(fix);
  f.why =
      "Batches are fetched round-robin by the workers but handed out in order: while the "
      "loop waits for a slow batch, the batches after it sit finished in the queue, and "
      "the other workers stop once their prefetch slots fill. Here the loop waited " +
      num(e.head_of_line_s) + " s (" + num(e.hol_share * 100) +
      "% of the loop) for a batch while a later one was already done; the median batch "
      "takes " +
      ms(e.fetch_p50_ms) + " and the slowest " + ms(e.fetch_max_ms.value_or(e.fetch_p50_ms)) + ".";
  if (e.short_of_demand)
    f.why +=
        " The workers are also short of the loop's demand on average, so the slow "
        "fetch itself is a cause as well (see slow_getitem / io_bound).";
  return f;
}

}  // namespace dldoctor::analyze::straggler_worker
