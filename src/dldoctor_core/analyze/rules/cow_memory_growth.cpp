// Each growing worker keeps copying at its slope for the samples it has left in this epoch,
// up to what it shares with the main process (its RSS); workers not read often enough grow
// as the others do.
#include "dldoctor_core/analyze/rules/cow_memory_growth.hpp"

#include <algorithm>
#include <cmath>

#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::cow_memory_growth {

namespace {

/// Where a read stands on the slope's axis: samples read, or seconds.
double x_of(const MemoryPoint& p, bool over_time) {
  return over_time ? double(p.t_ns) / 1e9 : double(p.samples);
}

/// Least-squares slope of private_dirty over samples (bytes per sample), or over time
/// (bytes per second).
std::optional<double> slope(const std::vector<MemoryPoint>& pts, bool over_time) {
  if (pts.size() < 2) return std::nullopt;
  double sx = 0, sy = 0;
  for (const MemoryPoint& p : pts) sx += x_of(p, over_time), sy += double(p.private_dirty);
  const double mx = sx / double(pts.size()), my = sy / double(pts.size());
  double sxy = 0, sxx = 0;
  for (const MemoryPoint& p : pts) {
    const double dx = x_of(p, over_time) - mx;
    sxy += dx * (double(p.private_dirty) - my);
    sxx += dx * dx;
  }
  if (sxx <= 0) return std::nullopt;
  return sxy / sxx;
}

/// Intervals between consecutive reads over which the copy rose at `min_slope` or more.
size_t rising_intervals(const std::vector<MemoryPoint>& pts, bool over_time, double min_slope) {
  size_t n = 0;
  for (size_t i = 1; i < pts.size(); ++i) {
    const double dx = x_of(pts[i], over_time) - x_of(pts[i - 1], over_time);
    if (dx > 0 && double(pts[i].private_dirty - pts[i - 1].private_dirty) >= min_slope * dx) ++n;
  }
  return n;
}

/// The worker's private memory that it shared with the main process before. A copy-on-write
/// turns a shared page private and leaves the RSS as it was; memory the worker allocates
/// itself (a heap that grows with the batches it builds, the allocator's own caches) adds to
/// both. Where every read has the RSS, its growth since the first read is taken off
/// private_dirty, so only the copies are left.
std::vector<MemoryPoint> copied_from_parent(const std::vector<MemoryPoint>& pts) {
  std::vector<MemoryPoint> out = pts;
  const bool all_rss =
      std::all_of(pts.begin(), pts.end(), [](const MemoryPoint& p) { return bool(p.rss); });
  if (pts.empty() || !all_rss) return out;
  const int64_t rss0 = *pts.front().rss;
  for (MemoryPoint& p : out) p.private_dirty -= std::max<int64_t>(0, *p.rss - rss0);
  return out;
}

std::string mib(double bytes) { return num(bytes / kMiB) + " MiB"; }

std::string attr_text(const DatasetAttr& a) {
  std::string t = a.name + " (" + a.type;
  if (a.elements)
    t +=
        " of " + std::to_string(*a.elements) + (a.element_type.empty() ? "" : " " + a.element_type);
  if (a.bytes) t += ", ~" + mib(double(*a.bytes));
  return t + ")";
}

std::optional<Growth> growth_of(const WorkerMemory& wm) {
  // A read before the worker's first batch is its start-up baseline: kept, since reads
  // are few (smaps_rollup of a large process costs milliseconds), and the growth and
  // slope thresholds are far above what a start-up adds.
  if (wm.points.size() < kCowMinPoints) return std::nullopt;
  const std::vector<MemoryPoint> pts = copied_from_parent(wm.points);
  Growth g;
  g.pid = wm.pid;
  g.worker = wm.worker;
  g.first = double(wm.points.front().private_dirty);  // as read (the evidence's figures)
  g.last = double(wm.points.back().private_dirty);
  g.samples_first = pts.front().samples;
  g.samples_last = pts.back().samples;
  g.rss = pts.back().rss;
  g.pss = pts.back().pss;
  g.over_time = wm.over_time;
  g.seconds = double(pts.back().t_ns - pts.front().t_ns) / 1e9;
  auto s = slope(pts, g.over_time);
  if (!s) return std::nullopt;
  g.slope = *s;
  const double copied = double(pts.back().private_dirty - pts.front().private_dirty);
  if (g.over_time) {
    if (pts.back().t_ns - pts.front().t_ns < kCowMinSpanNs) return std::nullopt;
    if (copied < kCowMinTimeGrowthBytes || g.slope < kCowMinBytesPerSecond) return std::nullopt;
  } else {
    if (g.samples_last - g.samples_first < kCowMinSamples) return std::nullopt;
    if (copied < kCowMinGrowthBytes || g.slope < kCowMinBytesPerSample) return std::nullopt;
  }
  // Still growing: the slope over the newer half of the reads (the last two at least).
  const double mid = (x_of(pts.front(), g.over_time) + x_of(pts.back(), g.over_time)) / 2;
  auto late_begin = std::find_if(pts.begin(), pts.end(), [&](const MemoryPoint& p) {
    return x_of(p, g.over_time) >= mid;
  });
  if (pts.end() - late_begin < 2) late_begin = pts.end() - 2;
  auto recent = slope(std::vector<MemoryPoint>(late_begin, pts.end()), g.over_time);
  // At a share of its own mean rate as well: a rise of 35 MiB then a drift of 0.2 MiB over
  // the next 464 samples is 450 bytes a sample, over the bare minimum but a step that ended.
  const double recent_min =
      std::max(g.over_time ? kCowMinBytesPerSecond : kCowMinRecentBytesPerSample,
               kCowMinRecentShare * g.slope);
  if (!recent || *recent < recent_min) return std::nullopt;
  // Rising from read to read, not one step (a garbage collection's copy of the heap).
  if (rising_intervals(pts, g.over_time, recent_min) < kCowMinRisingIntervals) return std::nullopt;
  return g;
}

}  // namespace

std::vector<Evidence> detect(const JobView& job) {
  std::vector<Evidence> out;
  for (const LoaderView& l : job.loaders) {
    if (l.config.num_workers <= 0) continue;
    // Under spawn and forkserver every worker unpickles its own dataset: nothing is shared.
    if (l.config.start_method == trace::StartMethod::kSpawn ||
        l.config.start_method == trace::StartMethod::kForkserver)
      continue;
    Evidence e;
    for (const WorkerMemory& wm : l.worker_memory)
      if (auto g = growth_of(wm)) e.growing.push_back(*g);
    if (e.growing.empty()) continue;

    e.loader = l.loader;
    e.num_workers = l.config.num_workers;
    e.over_time = e.growing.front().over_time;
    if (!e.over_time && l.dataset && l.dataset->length && *l.dataset->length > 0)
      e.per_worker_epoch = double(*l.dataset->length) / double(e.num_workers);
    double slope_sum = 0;
    for (const Growth& g : e.growing) {
      slope_sum += g.slope;
      e.now_total += g.last;
      e.grown += g.last - g.first;
      if (g.pss) e.pss_total += double(*g.pss);
      if (e.over_time) {
        double more = g.slope * kCowHorizonS;
        if (g.rss) more = std::min(more, std::max(0.0, double(*g.rss) - g.last));
        e.projected_more += more;
      } else if (e.per_worker_epoch) {
        const double done = std::fmod(double(g.samples_last), *e.per_worker_epoch);
        double more = g.slope * std::max(0.0, *e.per_worker_epoch - done);
        if (g.rss) more = std::min(more, std::max(0.0, double(*g.rss) - g.last));
        e.projected_more += more;
      }
    }
    e.slope_mean = slope_sum / double(e.growing.size());
    const double scale = double(std::max<size_t>(size_t(e.num_workers), e.growing.size())) /
                         double(e.growing.size());
    e.projected_more *= scale;
    e.available = job.machine.mem_available_last_bytes ? job.machine.mem_available_last_bytes
                                                       : job.facts.memory.available_bytes;
    e.dataset_inspected = l.dataset.has_value();
    if (l.dataset)
      for (const DatasetAttr& a : l.dataset->attrs)
        if (a.python_objects) e.culprits.push_back(a);

    // What the copying costs: grown so far plus what the epoch's rest will add.
    const double basis = e.grown + e.projected_more;
    if ((e.per_worker_epoch || e.over_time) && e.available &&
        e.projected_more >= kCowCriticalShareOfAvailable * double(*e.available))
      e.rank.severity = report::Severity::kCritical;
    else if (basis >= kCowWarnProjectedBytes)
      e.rank.severity = report::Severity::kWarning;
    else
      e.rank.severity = report::Severity::kInfo;
    e.rank.score = e.available && *e.available > 0 ? std::min(1.0, basis / double(*e.available))
                                                   : kUnknownShareScore;
    out.push_back(std::move(e));
  }
  return out;
}

report::Finding finding(const Evidence& e) {
  const bool projected = e.per_worker_epoch.has_value();
  const auto& available = e.available;
  report::Finding f = report::make_finding("cow_memory_growth", e.loader, e.rank);
  // Per sample read under the hooks; per second attached (the samples read are unknown).
  const std::string rate = e.over_time ? num(e.slope_mean / kMiB) + " MiB more private memory a second"
                                       : num(e.slope_mean * 1000 / kMiB) +
                                             " MiB more private memory per 1000 samples";
  f.title = "Loader " + std::to_string(e.loader) + ": " +
            count_of(double(e.growing.size()), "worker") + " copy the dataset as they read it (" +
            rate + (e.culprits.empty() ? std::string(")") : ", from " + e.culprits[0].name + ")");
  f.add("workers_growing", double(e.growing.size()));
  f.add("num_workers", double(e.num_workers));
  if (e.over_time)
    f.add("private_dirty_mib_per_s", e.slope_mean / kMiB);
  else
    f.add("private_dirty_mib_per_1000_samples", e.slope_mean * 1000 / kMiB);
  std::string each;
  for (const Growth& g : e.growing) {
    if (!each.empty()) each += "; ";
    each += "worker " + std::to_string(g.worker) + " (pid " + std::to_string(g.pid) +
            "): " + num(g.first / kMiB) + " -> " + num(g.last / kMiB) + " MiB over " +
            (g.over_time ? num(g.seconds) + " s"
                         : "samples " + std::to_string(g.samples_first) + "-" +
                               std::to_string(g.samples_last));
  }
  f.add("private_dirty_each", each);
  f.add("private_dirty_mib_total", e.now_total / kMiB);
  f.add("private_dirty_grown_mib", e.grown / kMiB);
  if (e.pss_total > 0) f.add("pss_mib_total", e.pss_total / kMiB);
  if (e.over_time) {
    f.add("samples_read", std::string("unknown (attached: no hooks count the samples)"));
    f.add("projected_growth_next_10_min_mib", e.projected_more / kMiB);
  } else if (projected) {
    f.add("samples_per_worker_per_epoch", *e.per_worker_epoch);
    f.add("projected_growth_to_epoch_end_mib", e.projected_more / kMiB);
  } else {
    f.add("projected_growth_to_epoch_end_mib", std::string("unknown (dataset length unknown)"));
  }
  if (available) f.add("mem_available_mib", double(*available) / kMiB);
  if (!e.culprits.empty()) {
    std::string names;
    for (const DatasetAttr& a : e.culprits) names += (names.empty() ? "" : "; ") + attr_text(a);
    f.add("python_object_attributes", names);
  } else {
    f.add("python_object_attributes",
          std::string(e.dataset_inspected ? "none found among the dataset's attributes"
                                          : "unknown (the dataset was not inspected)"));
  }

  std::string what = e.culprits.empty() ? std::string("the dataset's large Python lists and dicts")
                                        : std::string();
  for (size_t i = 0; i < e.culprits.size() && i < 3; ++i)
    what += (i ? ", " : "") + std::string("dataset.") + e.culprits[i].name;
  f.fix = "Store " + what +
          " as numpy arrays (numbers directly; strings as one np.array of fixed-width bytes "
          "or a single encoded buffer plus an offsets array), a pyarrow table, or tensors, "
          "instead of Python lists and dicts of objects: workers then read them without "
          "writing to the shared pages. Build them that way in __init__, before the workers "
          "fork.";
  f.why =
      "Forked workers share the main process's memory copy-on-write. Python keeps a "
      "reference count inside every object and changes it whenever the object is read, "
      "so each sample a worker reads writes to the page that holds it and the kernel "
      "copies that page into the worker (the garbage collector's passes touch the "
      "objects' pages too). Here each growing worker's Private_Dirty rose by " +
      (e.over_time ? mib(e.slope_mean) + " a second while its RSS stayed (shared pages turned "
                                         "private), up to " +
                         mib(e.projected_more) + " more over the next 10 minutes" +
                         (available ? " against " + mib(double(*available)) + " available"
                                    : std::string())
                   : mib(e.slope_mean * 1000) + " per 1000 samples read") +
      (projected
           ? ", about " + mib(e.projected_more) + " more by the end of the epoch" +
                 (available ? " against " + mib(double(*available)) + " available" : std::string())
           : std::string()) +
      ": every worker ends up with its own copy of the objects it read, multiplied by "
      "num_workers. A numpy array, pyarrow buffer or tensor is one object whose data "
      "holds no reference counts: reading it writes nothing to the shared pages.";
  return f;
}

}  // namespace dldoctor::analyze::cow_memory_growth
