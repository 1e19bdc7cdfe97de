// straggler_worker: a few batches (or one worker's) take far longer than the rest, and with
// in-order delivery the loop waits for each of them while later batches are already done
// (head-of-line blocking). Shown by the batch-time distribution per worker, the slow batches
// with their sample indices, and the head-of-line wait. Fix: in_order=False, then the slow
// samples' work moved offline or bucketed.
#include <algorithm>
#include <cmath>
#include <set>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {

namespace {

/// A batch is slow when it takes this many times the loader's median batch: far beyond the
/// ±50% that the same work varies by on a busy machine.
constexpr double kSlowBatchRatio = 5.0;

/// A worker is a straggler when its median batch takes this many times the median of the
/// other workers' medians (same work split round-robin should take the same time).
constexpr double kSlowWorkerRatio = 2.0;

/// Head-of-line wait, as a share of the loop, that makes the stragglers a cause of the
/// stall: the same cut as the data-stall gate itself.
constexpr double kHolShareOfLoop = kDataStallFraction;

/// Share of the loop's wait that must be head-of-line for the finding to be critical: the
/// stragglers, not a general shortage, then hold the loop up.
constexpr double kHolShareOfWait = 0.3;

/// Batches a worker needs for its median to count.
constexpr int64_t kMinWorkerBatches = 5;

std::string ms(double v) { return num(v) + " ms"; }

}  // namespace

void rule_straggler_worker(const JobView& job, std::vector<report::Finding>& out) {
  for (const LoaderView& l : job.loaders) {
    if (l.config.num_workers < 2 || !stalled(l)) continue;
    if (!l.config.in_order()) continue;  // out of order, nothing waits behind a straggler
    if (!l.head_of_line_s || !l.wait_s || l.loop_s <= 0 || !l.fetch_p50_ms ||
        *l.fetch_p50_ms <= 0)
      continue;
    const double hol_share = *l.head_of_line_s / l.loop_s;
    if (hol_share < kHolShareOfLoop) continue;

    // A slow worker: its median against the other workers'.
    const WorkerFetch* slow_worker = nullptr;
    double worker_ratio = 0;
    for (const WorkerFetch& w : l.worker_fetch) {
      if (w.batches < kMinWorkerBatches || !w.p50_ms) continue;
      std::vector<double> others;
      for (const WorkerFetch& o : l.worker_fetch)
        if (&o != &w && o.batches >= kMinWorkerBatches && o.p50_ms) others.push_back(*o.p50_ms);
      auto med = quantile(others, 0.5);
      if (!med || *med <= 0) continue;
      const double r = *w.p50_ms / *med;
      if (r >= kSlowWorkerRatio && r > worker_ratio) {
        worker_ratio = r;
        slow_worker = &w;
      }
    }
    // Slow batches: the tail against the median.
    const double cut = kSlowBatchRatio * *l.fetch_p50_ms;
    std::vector<const WorkerBatchRecord*> slow;
    for (const WorkerBatchRecord& r : l.slowest_batches)
      if (double(r.fetch_ns) / 1e6 >= cut) slow.push_back(&r);
    if (!slow_worker && slow.empty()) continue;

    const double stall = *l.data_stall_fraction;
    const double hol_of_wait = *l.wait_s > 0 ? *l.head_of_line_s / *l.wait_s : 0;
    const bool short_of_demand = shortfall(l).has_value();

    report::Finding f;
    f.id = "straggler_worker";
    f.loader = l.loader;
    f.severity = (!short_of_demand && hol_of_wait >= kHolShareOfWait)
                     ? report::Severity::kCritical
                     : report::Severity::kWarning;
    f.score = stall * std::min(1.0, hol_of_wait);
    if (slow_worker)
      f.title = "Loader " + std::to_string(l.loader) + ": worker " +
                std::to_string(slow_worker->worker) + " is " + num(worker_ratio) +
                "x slower than the others, and the loop waits for it in order";
    else
      f.title = "Loader " + std::to_string(l.loader) + ": a few batches take " +
                num(double(slow.front()->fetch_ns) / 1e6 / *l.fetch_p50_ms) +
                "x the median, and the loop waits for each of them while later batches are "
                "ready";
    f.add("data_stall_fraction", stall);
    f.add("head_of_line_wait_s", *l.head_of_line_s);
    f.add("head_of_line_share_of_loop", hol_share);
    f.add("head_of_line_share_of_wait", hol_of_wait);
    f.add("head_of_line_batches", double(l.head_of_line_batches));
    f.add("fetch_p50_ms", *l.fetch_p50_ms);
    if (l.fetch_p99_ms) f.add("fetch_p99_ms", *l.fetch_p99_ms);
    if (l.fetch_max_ms) f.add("fetch_max_ms", *l.fetch_max_ms);
    std::string dist;
    for (const WorkerFetch& w : l.worker_fetch) {
      if (!w.p50_ms) continue;
      dist += (dist.empty() ? "" : "; ") + std::string("worker ") + std::to_string(w.worker) +
              ": p50 " + ms(*w.p50_ms) + ", p90 " + ms(w.p90_ms.value_or(0)) + ", max " +
              ms(w.max_ms.value_or(0)) + " (" + std::to_string(w.batches) + " batches)";
    }
    f.add("batch_ms_per_worker", dist);
    if (slow_worker) {
      f.add("slow_worker", double(slow_worker->worker));
      f.add("slow_worker_pid", double(slow_worker->pid));
      f.add("slow_worker_ratio", worker_ratio);
    }
    f.add("slow_batches", double(slow.size()));

    // The slow batches, with their samples when the worker reported them.
    std::string listed;
    std::set<int64_t> samples;
    for (size_t i = 0; i < slow.size() && i < 6; ++i) {
      const WorkerBatchRecord& r = *slow[i];
      listed += (listed.empty() ? "" : "; ") + std::string("batch ") + std::to_string(r.index) +
                " (worker " + std::to_string(r.worker) + ", " + ms(double(r.fetch_ns) / 1e6) + ")";
    }
    std::string notes_text;
    for (const SlowBatchNote& n : l.slow_notes) {
      if (double(n.fetch_ns) / 1e6 < cut) continue;
      for (int64_t s : n.samples) samples.insert(s);
    }
    if (!listed.empty()) f.add("slowest_batches", listed);
    std::string sample_text;
    int shown = 0;
    for (int64_t s : samples) {
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
        num(double(l.head_of_line_batches)) + " waits seen behind it (the order of batches "
        "within an epoch changes; fine for shuffled training).";
    if (slow_worker)
      fix += " Then find why worker " + std::to_string(slow_worker->worker) +
             " is slower: with an IterableDataset its shard may be larger or on slower "
             "storage; rebalance the shards.";
    else
      fix += " Then make the slow samples cheaper" +
             (sample_text.empty() ? std::string() : " (dataset indices " + sample_text + ")") +
             ": precompute their expensive part offline, or, when their cost grows with their "
             "size (long sequences, large images), bucket samples of similar size into the "
             "same batches.";
    f.fix = std::move(fix);
    f.why = "Batches are fetched round-robin by the workers but handed out in order: while the "
            "loop waits for a slow batch, the batches after it sit finished in the queue, and "
            "the other workers stop once their prefetch slots fill. Here the loop waited " +
            num(*l.head_of_line_s) + " s (" + num(hol_share * 100) +
            "% of the loop) for a batch while a later one was already done; the median batch "
            "takes " + ms(*l.fetch_p50_ms) + " and the slowest " +
            ms(l.fetch_max_ms.value_or(*l.fetch_p50_ms)) + ".";
    if (short_of_demand)
      f.why += " The workers are also short of the loop's demand on average, so the slow "
               "fetch itself is a cause as well (see slow_getitem / io_bound).";
    out.push_back(std::move(f));
  }
}

}  // namespace dldoctor::analyze
