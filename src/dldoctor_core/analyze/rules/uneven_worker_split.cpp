// Idle workers cost nothing while the loop keeps up: the finding needs a stall, and then it
// comes first, as the one fix that needs no more CPU.
#include "dldoctor_core/analyze/rules/uneven_worker_split.hpp"

#include <algorithm>

#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::uneven_worker_split {

bool uneven(const LoaderView& l) noexcept {
  if (!l.worker_split || l.config.num_workers < 2) return false;
  const WorkerSplit& w = *l.worker_split;
  const double epochs_s = w.num_workers > 0 ? w.worker_s / w.num_workers : 0.0;
  return epochs_s >= kMinEpochS && w.idle_share() >= kMinIdleShare &&
         w.short_handed_wait_share.value_or(0) >= kShortHandedWaitShare;
}

std::vector<Evidence> detect(const JobView& job) {
  std::vector<Evidence> out;
  for (const LoaderView& l : job.loaders) {
    if (!uneven(l) || !stalled(l)) continue;
    Evidence e;
    e.loader = l.loader;
    e.num_workers = l.config.num_workers;
    e.data_stall_fraction = *l.data_stall_fraction;
    e.split = *l.worker_split;
    // The whole stall: idle workers are the cheapest capacity there is, so this fix comes
    // before the fetch rules' (which name the same stall, scored by their share of it).
    e.rank = {report::Severity::kCritical, report::Tier::kMeasure, e.data_stall_fraction};
    out.push_back(std::move(e));
  }
  return out;
}

report::Finding finding(const Evidence& e) {
  const WorkerSplit& w = e.split;
  report::Finding f = report::make_finding("uneven_worker_split", e.loader, e.rank);
  // The workers that idled a real part of the worst epoch (not the last batches' few).
  std::vector<WorkerSplit::Out> out;
  for (const WorkerSplit::Out& o : w.ran_out)
    if (o.idle_s >= kMinIdleShare * w.epoch_s) out.push_back(o);
  if (out.empty()) out = w.ran_out;
  const WorkerSplit::Out& first = out.front();
  const int none = int(std::count_if(out.begin(), out.end(), [](const WorkerSplit::Out& o) {
    return o.worker.batches == 0;
  }));
  f.title = "Loader " + std::to_string(e.loader) + ": " + std::to_string(out.size()) + " of its " +
            std::to_string(e.num_workers) +
            " workers ran out of data early, and the loop went on with " +
            num(w.active_workers()) + " workers with data on average";
  f.add("data_stall_fraction", e.data_stall_fraction);
  f.add("num_workers", double(e.num_workers));
  f.add("idle_worker_share", w.idle_share());
  f.add("active_workers", w.active_workers());
  f.add("workers_ran_out", double(out.size()));
  f.add("workers_without_data", double(none));
  f.add("epoch_s", w.epoch_s);
  f.add("short_handed_wait_share", w.short_handed_wait_share.value_or(0));
  std::string each;
  for (size_t i = 0; i < out.size() && i < 8; ++i) {
    const WorkerSplit::Out& o = out[i];
    each += (each.empty() ? "" : "; ") + std::string("worker ") + std::to_string(o.worker.worker) +
            " after " + std::to_string(o.worker.batches) + " batches, " + num(o.after_s) +
            " s in, then idle " + num(o.idle_s) + " s";
  }
  if (out.size() > 8) each += "; ...";
  f.add("ran_out", each);
  f.fix =
      "Give every worker data to the end of the epoch: torch hands each worker its own copy "
      "of an IterableDataset, so the dataset's own split decides what each yields. Make the "
      "shards a multiple of num_workers (x ranks, when each rank splits them too) and of "
      "similar size: webdataset, more shard files than workers; Hugging Face datasets, "
      "n_shards >= num_workers (more files, or Dataset.to_iterable_dataset(num_shards=N)); an "
      "__iter__ of your own, split by sample with get_worker_info() "
      "(itertools.islice(it, info.id, None, info.num_workers)) rather than by file." +
      std::string(none == int(out.size())
                      ? " Until then, workers beyond the number of shards only cost memory."
                      : "");
  f.why = "The loop waits " + num(e.data_stall_fraction * 100) +
          "% of its time for batches while " + std::to_string(out.size()) + " of " +
          std::to_string(e.num_workers) + " workers had nothing left to fetch (the first, worker " +
          std::to_string(first.worker.worker) + ", after " + std::to_string(first.worker.batches) +
          " batches, " + num(first.after_s) + " s into a " + num(w.epoch_s) +
          " s epoch): the workers spent " + num(w.idle_share() * 100) +
          "% of their time without data, so the loader ran on " + num(w.active_workers()) +
          " of its " + std::to_string(e.num_workers) +
          " workers on average, and " + num(w.short_handed_wait_share.value_or(0) * 100) +
          "% of the loop's waits came while a worker had run out. A map-style dataset has no "
          "such gap: its sampler deals indices to every worker until the epoch ends.";
  return f;
}

}  // namespace dldoctor::analyze::uneven_worker_split
