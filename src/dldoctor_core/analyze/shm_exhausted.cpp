// shm_exhausted (seed cause 3): workers hand every batch to the main process through
// /dev/shm. When the batches in flight do not fit, the collate or the send fails ("No space
// left on device") or the worker dies of SIGBUS touching a page the tmpfs cannot back; a
// batch lost in the send leaves the main process waiting forever. Predicted from the batch
// bytes and the queue depths before it happens, confirmed by the failure when it does.
#include <algorithm>
#include <cmath>
#include <csignal>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"
#include "dldoctor_core/analyze/verdict.hpp"

namespace dldoctor::analyze {

/// /dev/shm should hold this many times the batches in flight (the same margin as
/// `dldoctor check`): batch sizes vary (variable-length samples, the last batch), the
/// consumer's previous batch is freed only after the next one arrives, and NCCL and other
/// processes on the node keep their own segments there.
inline constexpr double kShmMargin = 2.0;

/// Batches the main process holds in /dev/shm beside the workers' queues: the one the
/// consumer trains on (its segments are unmapped only when it is dropped).
inline constexpr int kConsumerHeldBatches = 1;

/// /dev/shm used at this share of its size, as the sampler saw it, is full in practice:
/// the next batch of a prefetching worker needs room at once.
inline constexpr double kShmFullFraction = 0.9;

/// Scores of the warnings: batches that will not fit rank with a bottleneck that explains
/// the whole stall, a thin margin with one that explains half of it.
inline constexpr double kPredictedOverflowScore = 1.0;
inline constexpr double kThinMarginScore = 0.5;

/// torch's default prefetch_factor with workers.
inline constexpr int kDefaultPrefetchFactor = 2;

namespace {

struct InFlight {
  double batch_bytes = 0;
  int workers = 0;
  int prefetch = kDefaultPrefetchFactor;
  bool prefetch_known = false;
  int batches() const noexcept { return workers * prefetch + kConsumerHeldBatches; }
  double bytes() const noexcept { return batch_bytes * batches(); }
  double bytes_with(int w, int p) const noexcept {
    return batch_bytes * (w * p + kConsumerHeldBatches);
  }
};

std::optional<InFlight> in_flight(const LoaderView& l) noexcept {
  if (l.config.num_workers <= 0 || !l.batch_bytes_mean || *l.batch_bytes_mean <= 0)
    return std::nullopt;
  InFlight f;
  f.batch_bytes = *l.batch_bytes_mean;
  f.workers = l.config.num_workers;
  if (l.config.prefetch_factor) {
    f.prefetch = *l.config.prefetch_factor;
    f.prefetch_known = true;
  }
  return f;
}

/// The smaller setting that fits `free_bytes` with the margin, said as a sentence part
/// ("prefetch_factor=2"); "" when nothing smaller fits.
std::string fits_today(const InFlight& f, const LoaderView& l, double free_bytes) {
  const double room = free_bytes / kShmMargin;
  for (int p = f.prefetch - 1; p >= 1; --p)
    if (f.bytes_with(f.workers, p) <= room) return "prefetch_factor=" + std::to_string(p);
  for (int w = f.workers - 1; w >= 1; --w)
    if (f.bytes_with(w, 1) <= room)
      return "num_workers=" + std::to_string(w) + ", prefetch_factor=1";
  if (l.config.batch_size && *l.config.batch_size > 1) {
    const double per_sample = f.batch_bytes / *l.config.batch_size;
    const int bs = int(std::floor(room / (per_sample * f.batches())));
    if (bs >= 1 && bs < *l.config.batch_size)
      return "batch_size=" + std::to_string(bs) + " (with gradient accumulation to keep the "
             "effective batch)";
  }
  return "";
}

/// Free /dev/shm for the loader: what was free when the job started (the watcher reads it
/// before any batch exists), else the size less the least use the sampler saw.
std::optional<double> shm_free(const JobView& job) noexcept {
  if (job.facts.shm.free_bytes) return double(*job.facts.shm.free_bytes);
  const auto total = job.facts.shm.total_bytes ? job.facts.shm.total_bytes
                                               : job.machine.shm_total_bytes;
  if (total && job.machine.shm_used_min_bytes)
    return double(*total - *job.machine.shm_used_min_bytes);
  return std::nullopt;
}

struct Failure {
  std::string text;  ///< the error text, or the death's description
  int loader = -1;
  bool sigbus = false;
  int64_t lost = 0;  ///< batches a worker could not send (the main process waits for them)
};

std::vector<Failure> shm_failures(const FailureView& fv) {
  std::vector<Failure> out;
  for (const WorkerDeath& d : fv.deaths)
    if (d.signal && *d.signal == SIGBUS)
      out.push_back({d.message.empty() ? "worker " + std::to_string(d.worker) + " (pid " +
                                             std::to_string(d.pid) + ") killed by SIGBUS"
                                       : d.message,
                     d.loader, true});
  for (const ErrorNote& e : fv.errors)
    if (classify_error(e.type, e.message) == ErrorKind::kShmNoSpace)
      out.push_back({error_line(e.message, ErrorKind::kShmNoSpace), e.loader, false,
                     e.source == ErrorSource::kQueueFeeder ? e.count : 0});
  return out;
}

}  // namespace

void rule_shm_exhausted(const JobView& job, std::vector<report::Finding>& out) {
  const std::vector<Failure> failures = shm_failures(job.failures);
  const std::optional<double> free = shm_free(job);
  const auto total = job.facts.shm.total_bytes ? job.facts.shm.total_bytes
                                               : job.machine.shm_total_bytes;
  const auto used_peak = job.machine.shm_used_max_bytes;
  const bool observed_full =
      used_peak && total && *total > 0 && double(*used_peak) >= kShmFullFraction * *total;

  // The loader to size the fix from: the one a failure names, else the one with the most
  // bytes in flight (with workers and known batch bytes).
  const LoaderView* worst = nullptr;
  std::optional<InFlight> worst_f;
  for (const LoaderView& l : job.loaders) {
    auto f = in_flight(l);
    if (!f) continue;
    const bool named = std::any_of(failures.begin(), failures.end(),
                                   [&](const Failure& x) { return x.loader == l.loader; });
    const bool named_worst =
        worst && std::any_of(failures.begin(), failures.end(),
                             [&](const Failure& x) { return x.loader == worst->loader; });
    if (!worst || (named && !named_worst) ||
        (named == named_worst && f->bytes() > worst_f->bytes())) {
      worst = &l;
      worst_f = f;
    }
  }

  const bool predicted_over = worst_f && free && worst_f->bytes() > *free;
  const bool thin_margin = worst_f && free && worst_f->bytes() * kShmMargin > *free;
  if (failures.empty() && !thin_margin && !observed_full) return;

  report::Finding f;
  f.id = "shm_exhausted";
  f.loader = worst ? worst->loader : (failures.empty() ? -1 : failures.front().loader);
  const bool failed = !failures.empty();
  f.severity = failed ? report::Severity::kCritical : report::Severity::kWarning;
  // A failure here is the job's end, so it outranks every throughput finding.
  if (failed) f.tier = report::Tier::kFailure;
  f.score = failed ? 0.0 : (predicted_over ? kPredictedOverflowScore : kThinMarginScore);

  const std::string shm_size = total ? bytes_text(double(*total)) : std::string("unknown");
  if (failed) {
    const Failure& x = failures.front();
    f.title = x.sigbus ? "A DataLoader worker died of SIGBUS: /dev/shm (" + shm_size +
                             ") is too small for the batches in flight"
                       : "/dev/shm (" + shm_size + ") ran out of space for the batches in flight";
    f.add("failure", x.text.substr(0, 300));
    f.add("failures", double(failures.size()));
    int64_t lost = 0;
    for (const Failure& y : failures) lost += y.lost;
    if (lost > 0) f.add(kBatchesLost, double(lost));
  } else if (predicted_over) {
    f.title = "The batches in flight (" + bytes_text(worst_f->bytes()) + ") will not fit in "
              "/dev/shm (" + bytes_text(*free) + " free): workers will fail when the queues fill";
  } else if (thin_margin) {
    f.title = "The batches in flight (" + bytes_text(worst_f->bytes()) + ") fill more than half of "
              "/dev/shm (" + bytes_text(*free) + " free): little margin before workers fail";
  } else {
    f.title = "/dev/shm was " + num(100.0 * double(*used_peak) / double(*total)) +
              "% full while the job ran";
  }

  if (total) f.add("shm_total_bytes", double(*total));
  if (free) f.add("shm_free_bytes", *free);
  if (used_peak) f.add("shm_used_peak_bytes", double(*used_peak));
  double need = 0;
  if (worst_f) {
    f.add("batch_bytes", worst_f->batch_bytes);
    f.add("num_workers", double(worst_f->workers));
    f.add("prefetch_factor", double(worst_f->prefetch));
    f.add("batches_in_flight", double(worst_f->batches()));
    f.add("in_flight_bytes", worst_f->bytes());
    need = worst_f->bytes();
  }
  // A failure with fewer bytes predicted than free means something else fills /dev/shm
  // too (a dataset's own shared cache, another job): size from what was seen in use.
  if (failed && used_peak && double(*used_peak) > need) need = double(*used_peak);
  if (!failed && observed_full && used_peak && double(*used_peak) > need)
    need = double(*used_peak);
  const double needed = need * kShmMargin;
  if (need > 0) f.add("shm_size_needed_bytes", needed);

  std::string alt;
  if (worst_f && free) alt = fits_today(*worst_f, *worst, *free);
  if (!alt.empty()) f.add("fits_today", alt);

  if (need > 0) {
    const int64_t gib = std::max<int64_t>(1, int64_t(std::ceil(needed / double(1LL << 30))));
    f.fix = "Make /dev/shm at least " + bytes_text(needed) + " (" + num(kShmMargin) +
            "x the " + bytes_text(need) + " in flight). Docker: docker run --shm-size=" +
            std::to_string(gib) + "g (or --ipc=host); Kubernetes: an emptyDir with medium: "
            "Memory and sizeLimit: " + std::to_string(gib) + "Gi mounted at /dev/shm; bare "
            "metal: sudo mount -o remount,size=" + std::to_string(gib) + "G /dev/shm.";
  } else {
    f.fix = "Make /dev/shm larger (Docker: --shm-size or --ipc=host; Kubernetes: an emptyDir "
            "with medium: Memory at /dev/shm; bare metal: mount -o remount,size=...).";
  }
  if (!alt.empty())
    f.fix += " Or, with today's " + (free ? bytes_text(*free) : shm_size) + ", keep fewer "
             "batches in flight: " + alt + " fits with the same margin.";
  else if (worst_f)
    f.fix += " Fewer batches in flight (a smaller prefetch_factor, fewer workers, a smaller "
             "batch) would also fit, but none of the settings tried does with today's size.";

  f.why = "Each worker puts every batch it prepares into a shared-memory segment in /dev/shm "
          "and keeps up to prefetch_factor of them waiting for the main process, which holds "
          "one more while it trains: " +
          (worst_f ? std::to_string(worst_f->workers) + " workers x prefetch_factor " +
                         std::to_string(worst_f->prefetch) +
                         (worst_f->prefetch_known ? "" : " (torch's default)") + " + " +
                         std::to_string(kConsumerHeldBatches) + " = " +
                         std::to_string(worst_f->batches()) + " batches of " +
                         bytes_text(worst_f->batch_bytes) + ". "
                   : std::string("the batches in flight must fit. ")) +
          "When /dev/shm is full, allocating a segment fails with \"No space left on device\", "
          "and touching a page the tmpfs cannot back kills the worker with SIGBUS; a batch "
          "that fails while it is being sent is lost, and the main process then waits for it "
          "forever. Containers start with a 64 MiB /dev/shm unless told otherwise.";
  out.push_back(std::move(f));
}

}  // namespace dldoctor::analyze
