// The loader to size the fix from is the one a failure names, else the one with the most
// bytes in flight; a failure with fewer bytes predicted than free means something else
// fills /dev/shm too, so the size then comes from the use the sampler saw.
#include "dldoctor_core/analyze/rules/shm_exhausted.hpp"

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>

#include "dldoctor_core/analyze/node_share.hpp"
#include "dldoctor_core/analyze/text.hpp"
#include "dldoctor_core/analyze/verdict.hpp"

namespace dldoctor::analyze {

namespace {

/// "34.0 MiB", "512 B": sizes as `dldoctor check` writes them (one decimal, binary units).
std::string check_bytes_text(double n) {
  static const struct {
    const char* unit;
    double size;
  } kUnits[] = {{"TiB", double(1LL << 40)},
                {"GiB", double(1LL << 30)},
                {"MiB", double(1 << 20)},
                {"KiB", double(1 << 10)}};
  char buf[48];
  for (const auto& u : kUnits)
    if (std::fabs(n) >= u.size) {
      std::snprintf(buf, sizeof buf, "%.1f %s", n / u.size, u.unit);
      return buf;
    }
  std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(n));
  return buf;
}

std::string replace_all(std::string s, const std::string& from, const std::string& to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
  return s;
}

}  // namespace

std::string shm_fix(const std::string& container_kind, double in_flight_bytes) {
  const int64_t gib =
      std::max<int64_t>(1, int64_t(std::ceil(in_flight_bytes * kShmMargin / double(1LL << 30))));
  const std::string g = std::to_string(gib);
  char margin[16];
  std::snprintf(margin, sizeof margin, "%g", kShmMargin);
  const std::string docker = "Docker: docker run --shm-size=" + g +
                             "g ... (or --ipc=host to share the host's "
                             "/dev/shm); docker compose: shm_size: '" +
                             g + "gb'";
  const std::string k8s =
      "Kubernetes: mount a memory-backed emptyDir at /dev/shm (its size counts against the "
      "pod's memory limit):\n"
      "  spec:\n"
      "    volumes:\n"
      "      - name: dshm\n"
      "        emptyDir:\n"
      "          medium: Memory\n"
      "          sizeLimit: " +
      g +
      "Gi\n"
      "    containers:\n"
      "      - name: trainer\n"
      "        volumeMounts:\n"
      "          - name: dshm\n"
      "            mountPath: /dev/shm";
  const std::string bare = "bare metal: sudo mount -o remount,size=" + g +
                           "G /dev/shm (lasts until reboot; to keep it, set size=" + g +
                           "G on the /dev/shm line of /etc/fstab)";
  const std::string lead = "make /dev/shm at least " + g + " GiB (" + margin + "x the " +
                           check_bytes_text(double(int64_t(in_flight_bytes))) +
                           " in flight, rounded up to whole GiB)";
  std::vector<std::string> order;
  if (container_kind == "kubernetes")
    order = {k8s, docker, bare};
  else if (container_kind == "docker")
    order = {docker, k8s, bare};
  else if (container_kind == "podman")
    order = {replace_all(docker, "docker run", "podman run"), k8s, bare};
  else
    order = {bare, docker, k8s};
  std::string out = lead + ".";
  for (const std::string& o : order) out += "\n" + o;
  return out +
         "\nor keep fewer batches in flight: lower num_workers or prefetch_factor, or a "
         "smaller batch";
}

}  // namespace dldoctor::analyze

namespace dldoctor::analyze::shm_exhausted {

namespace {

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
  f.batch_size = l.config.batch_size;
  return f;
}

/// The bytes the ranks hold with every rank's loader set to at most `w` workers and
/// prefetch_factor `p` (a rank already below keeps its own).
double total_with(const std::vector<InFlight>& ranks, int w, int p) {
  double t = 0;
  for (const InFlight& f : ranks)
    t += f.batch_bytes * (std::min(w, f.workers) * std::min(p, f.prefetch) + kConsumerHeldBatches);
  return t;
}

/// The smaller setting that fits `free_bytes` with the margin, said as a sentence part
/// ("prefetch_factor=2"); "" when nothing smaller fits. `ranks`: what each main process of
/// the node holds (its largest loader); the setting is for each of them (`f`, the largest
/// of all, sets the steps tried).
std::string fits_today(const InFlight& f, const std::vector<InFlight>& ranks,
                       double free_bytes) {
  const double room = free_bytes / kShmMargin;
  for (int p = f.prefetch - 1; p >= 1; --p)
    if (total_with(ranks, f.workers, p) <= room) return "prefetch_factor=" + std::to_string(p);
  for (int w = f.workers - 1; w >= 1; --w)
    if (total_with(ranks, w, 1) <= room)
      return "num_workers=" + std::to_string(w) + ", prefetch_factor=1";
  if (f.batch_size && *f.batch_size > 1) {
    double per_batch_sample = 0;  // bytes of one sample in every batch in flight, all ranks
    for (const InFlight& r : ranks) {
      if (!r.batch_size || *r.batch_size <= 0) return "";
      per_batch_sample += r.batch_bytes / *r.batch_size * r.batches();
    }
    const int bs = int(std::floor(room / per_batch_sample));
    if (bs >= 1 && bs < *f.batch_size)
      return "batch_size=" + std::to_string(bs) +
             " (with gradient accumulation to keep the "
             "effective batch)";
  }
  return "";
}

/// Free /dev/shm for the loader: what was free when the job started (the watcher reads it
/// before any batch exists), else the size less the least use the sampler saw.
std::optional<double> shm_free(const JobView& job) noexcept {
  if (job.facts.shm.free_bytes) return double(*job.facts.shm.free_bytes);
  const auto total =
      job.facts.shm.total_bytes ? job.facts.shm.total_bytes : job.machine.shm_total_bytes;
  if (total && job.machine.shm_used_min_bytes)
    return double(*total - *job.machine.shm_used_min_bytes);
  return std::nullopt;
}

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

std::optional<Evidence> detect(const JobView& job) {
  Evidence e;
  e.failures = shm_failures(job.failures);
  e.free_bytes = shm_free(job);
  e.total_bytes =
      job.facts.shm.total_bytes ? job.facts.shm.total_bytes : job.machine.shm_total_bytes;
  e.used_peak_bytes = job.machine.shm_used_max_bytes;
  const auto& total = e.total_bytes;
  const auto& used_peak = e.used_peak_bytes;
  const bool observed_full =
      used_peak && total && *total > 0 && double(*used_peak) >= kShmFullFraction * *total;

  // The loader to size the fix from: the one a failure names, else the one with the most
  // bytes in flight (with workers and known batch bytes).
  const auto& failures = e.failures;
  const LoaderView* worst = nullptr;
  for (const LoaderView& l : job.loaders) {
    auto f = in_flight(l);
    if (!f) continue;
    const bool named = std::any_of(failures.begin(), failures.end(),
                                   [&](const Failure& x) { return x.loader == l.loader; });
    const bool named_worst =
        worst && std::any_of(failures.begin(), failures.end(),
                             [&](const Failure& x) { return x.loader == worst->loader; });
    if (!worst || (named && !named_worst) ||
        (named == named_worst && f->bytes() > e.in_flight->bytes())) {
      worst = &l;
      e.in_flight = f;
    }
  }

  // Every main process of the node fills the same /dev/shm at once: each one's largest
  // loader, summed (one main process: that loader alone, as above).
  std::vector<InFlight> held;
  for (const RankShare& r : rank_shares(job)) {
    std::optional<InFlight> most;
    for (const LoaderView* l : r.loaders)
      if (auto f = in_flight(*l); f && (!most || f->bytes() > most->bytes())) most = f;
    if (!most) continue;
    held.push_back(*most);
    e.in_flight_total += most->bytes();
    e.batches_total += most->batches();
    e.rank_in_flight.emplace_back(r.name(), most->bytes());
  }
  if (held.size() < 2) {
    e.rank_in_flight.clear();
    held.clear();
    if (e.in_flight) {
      held.push_back(*e.in_flight);
      e.in_flight_total = e.in_flight->bytes();
      e.batches_total = e.in_flight->batches();
    }
  }

  const auto& f = e.in_flight;
  e.predicted_over = f && e.free_bytes && e.in_flight_total > *e.free_bytes;
  e.thin_margin = f && e.free_bytes && e.in_flight_total * kShmMargin > *e.free_bytes;
  if (failures.empty() && !e.thin_margin && !observed_full) return std::nullopt;

  const bool failed = !failures.empty();
  e.loader = worst ? worst->loader : (failures.empty() ? -1 : failures.front().loader);
  if (!e.rank_in_flight.empty()) e.loader = -1;  // the node's, not one rank's
  // A failure here is the job's end, so it outranks every throughput finding.
  e.rank.severity = failed ? report::Severity::kCritical : report::Severity::kWarning;
  if (failed) e.rank.tier = report::Tier::kFailure;
  e.rank.score = failed ? 0.0 : (e.predicted_over ? kPredictedOverflowScore : kThinMarginScore);

  if (f) e.need_bytes = e.in_flight_total;
  // A failure with fewer bytes predicted than free means something else fills /dev/shm
  // too (a dataset's own shared cache, another job): size from what was seen in use.
  if ((failed || observed_full) && used_peak && double(*used_peak) > e.need_bytes)
    e.need_bytes = double(*used_peak);
  if (f && e.free_bytes) {
    e.fits_today = fits_today(*f, held, *e.free_bytes);
    if (!e.fits_today.empty() && !e.rank_in_flight.empty()) e.fits_today += " in each rank's loader";
  }
  e.container_kind = job.facts.container_kind;
  return e;
}

namespace {

/// The fix with a known size: `dldoctor check`'s words, its last line naming the smaller
/// setting that fits today's size when there is one.
std::string sized_fix(const Evidence& e) {
  const double needed = e.need_bytes * kShmMargin;
  const double in_flight = e.in_flight ? e.in_flight_total : 0;
  // shm_fix sizes /dev/shm at kShmMargin x what it is given.
  const double base = in_flight * kShmMargin >= needed ? in_flight : needed / kShmMargin;
  std::string fix = shm_fix(e.container_kind, double(int64_t(base)));
  if (!e.fits_today.empty()) {
    const size_t last = fix.rfind('\n');
    fix = fix.substr(0, last + 1) + "or keep fewer batches in flight: " + e.fits_today +
          " fits today's size" +
          (e.free_bytes && *e.free_bytes != 0
               ? " (/dev/shm has " + check_bytes_text(*e.free_bytes) + " free now)"
               : std::string());
  }
  return fix;
}

}  // namespace

report::Finding finding(const Evidence& e) {
  const bool failed = !e.failures.empty();
  const auto& total = e.total_bytes;
  const auto& used_peak = e.used_peak_bytes;
  const auto& free = e.free_bytes;
  const std::optional<InFlight>& f = e.in_flight;

  report::Finding out = report::make_finding("shm_exhausted", e.loader, e.rank);
  const std::string shm_size = total ? bytes_text(double(*total)) : std::string("unknown");
  // "of ranks 0 and 1": the node's batches, every rank's together.
  std::string of_ranks;
  for (size_t i = 0; i < e.rank_in_flight.size(); ++i)
    of_ranks += (i == 0 ? " of " : i + 1 == e.rank_in_flight.size() ? " and " : ", ") +
                e.rank_in_flight[i].first;
  if (failed) {
    const Failure& x = e.failures.front();
    out.title = x.sigbus ? "A DataLoader worker died of SIGBUS: /dev/shm (" + shm_size +
                               ") is too small for the batches in flight"
                         : "/dev/shm (" + shm_size + ") ran out of space for the batches in flight";
    out.add("failure", x.text.substr(0, 300));
    out.add("failures", double(e.failures.size()));
    int64_t lost = 0;
    for (const Failure& y : e.failures) lost += y.lost;
    if (lost > 0) out.add(kBatchesLost, double(lost));
  } else if (e.predicted_over) {
    out.title = "The batches in flight" + of_ranks + " (" + bytes_text(e.in_flight_total) +
                ") will not fit in "
                "/dev/shm (" +
                bytes_text(*free) + " free): workers will fail when the queues fill";
  } else if (e.thin_margin) {
    out.title = "The batches in flight" + of_ranks + " (" + bytes_text(e.in_flight_total) +
                ") fill more than half of "
                "/dev/shm (" +
                bytes_text(*free) + " free): little margin before workers fail";
  } else {
    out.title = "/dev/shm was " + num(100.0 * double(*used_peak) / double(*total)) +
                "% full while the job ran";
  }

  if (total) out.add("shm_total_bytes", double(*total));
  if (free) out.add("shm_free_bytes", *free);
  if (used_peak) out.add("shm_used_peak_bytes", double(*used_peak));
  if (f) {
    out.add("batch_bytes", f->batch_bytes);
    out.add("num_workers", double(f->workers));
    out.add("prefetch_factor", double(f->prefetch));
    out.add("batches_in_flight", double(e.batches_total));
    out.add("in_flight_bytes", e.in_flight_total);
  }
  if (!e.rank_in_flight.empty()) {
    out.add("ranks", double(e.rank_in_flight.size()));
    out.add("rank_in_flight_bytes", shares_text(e.rank_in_flight));
  }
  if (e.need_bytes > 0) out.add("shm_size_needed_bytes", e.need_bytes * kShmMargin);
  if (!e.fits_today.empty()) out.add("fits_today", e.fits_today);

  if (e.need_bytes > 0) {
    out.fix = sized_fix(e);
  } else {
    out.fix =
        "Make /dev/shm larger (Docker: --shm-size or --ipc=host; Kubernetes: an emptyDir "
        "with medium: Memory at /dev/shm; bare metal: mount -o remount,size=...).";
    if (!e.fits_today.empty())
      out.fix += " Or, with today's " + (free ? bytes_text(*free) : shm_size) +
                 ", keep fewer "
                 "batches in flight: " +
                 e.fits_today + " fits with the same margin.";
    else if (f)
      out.fix +=
          " Fewer batches in flight (a smaller prefetch_factor, fewer workers, a smaller "
          "batch) would also fit, but none of the settings tried does with today's size.";
  }

  out.why =
      "Each worker puts every batch it prepares into a shared-memory segment in /dev/shm "
      "and keeps up to prefetch_factor of them waiting for the main process, which holds "
      "one more while it trains: " +
      (f ? std::to_string(f->workers) + " workers x prefetch_factor " +
               std::to_string(f->prefetch) + (f->prefetch_known ? "" : " (torch's default)") +
               " + " + std::to_string(kConsumerHeldBatches) + " = " + std::to_string(f->batches()) +
               " batches of " + bytes_text(f->batch_bytes) +
               (e.rank_in_flight.empty()
                    ? std::string(". ")
                    : " in one rank's loader, and every rank's workers do the same at once in "
                      "this node's one /dev/shm (" +
                          shares_text(e.rank_in_flight) + ": " + bytes_text(e.in_flight_total) +
                          " together). ")
         : std::string("the batches in flight must fit. ")) +
      "When /dev/shm is full, allocating a segment fails with \"No space left on device\", "
      "and touching a page the tmpfs cannot back kills the worker with SIGBUS; a batch "
      "that fails while it is being sent is lost, and the main process then waits for it "
      "forever. Containers start with a 64 MiB /dev/shm unless told otherwise.";
  return out;
}

}  // namespace dldoctor::analyze::shm_exhausted
