// cow_memory_growth: forked workers copy the main process's memory page by page as they read
// the dataset, because Python writes a reference count into every object it touches. Seen
// as each worker's Private_Dirty (smaps_rollup) growing with the samples it has read; the
// slope is projected to the end of the epoch against the memory available. The culprits are
// the dataset's large Python containers, named from the main process's inspection of it.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

/// smaps reads a worker needs for a slope: two are a line through anything, three show a
/// trend.
constexpr size_t kCowMinPoints = 3;

/// Samples the reads must span: fewer say nothing about growth *per sample*.
constexpr int64_t kCowMinSamples = 256;

/// Growth of one worker's Private_Dirty over the reads that counts. A worker's own
/// allocations (a batch's tensors, the allocator's arenas) settle within its first batches
/// at a few MiB; copy-on-write of a dataset's objects goes on for as long as it reads.
constexpr double kCowMinGrowthBytes = 32 * kMiB;

/// Bytes copied per sample read that count as growth with the samples: a page (4 KiB) per
/// few dozen samples. Reading a Python list of objects in random order copies up to a page
/// per sample; reading a numpy array copies nothing after warm-up.
constexpr double kCowMinBytesPerSample = 256;

/// Projected further growth of all the workers to the end of the epoch at which the
/// finding is a warning: enough memory to matter on any machine, and it multiplies with
/// num_workers. Below it (but growing) the finding is informational.
constexpr double kCowWarnProjectedBytes = 256 * kMiB;

/// Share of the available memory the projected growth may take before it is critical:
/// the job is then on its way to the OOM killer or to swapping within the epoch.
constexpr double kCowCriticalShareOfAvailable = 0.5;

/// Least-squares slope of private_dirty over samples (bytes per sample).
std::optional<double> slope(const std::vector<MemoryPoint>& pts) {
  if (pts.size() < 2) return std::nullopt;
  double sx = 0, sy = 0;
  for (const MemoryPoint& p : pts) sx += double(p.samples), sy += double(p.private_dirty);
  const double mx = sx / double(pts.size()), my = sy / double(pts.size());
  double sxy = 0, sxx = 0;
  for (const MemoryPoint& p : pts) {
    sxy += (double(p.samples) - mx) * (double(p.private_dirty) - my);
    sxx += (double(p.samples) - mx) * (double(p.samples) - mx);
  }
  if (sxx <= 0) return std::nullopt;
  return sxy / sxx;
}

std::string mib(double bytes) { return num(bytes / kMiB) + " MiB"; }

std::string attr_text(const DatasetAttr& a) {
  std::string t = a.name + " (" + a.type;
  if (a.elements)
    t += " of " + std::to_string(*a.elements) + (a.element_type.empty() ? "" : " " + a.element_type);
  if (a.bytes) t += ", ~" + mib(double(*a.bytes));
  return t + ")";
}

struct Growth {
  int pid = 0;
  int worker = -1;
  double slope = 0;  // bytes per sample
  double first = 0, last = 0;
  int64_t samples_first = 0, samples_last = 0;
  std::optional<int64_t> rss, pss;
};

}  // namespace

void rule_cow_memory_growth(const JobView& job, std::vector<report::Finding>& out) {
  for (const LoaderView& l : job.loaders) {
    if (l.config.num_workers <= 0) continue;
    // Under spawn and forkserver every worker unpickles its own dataset: nothing is shared.
    if (l.config.start_method == trace::StartMethod::kSpawn ||
        l.config.start_method == trace::StartMethod::kForkserver)
      continue;
    std::vector<Growth> growing;
    for (const WorkerMemory& wm : l.worker_memory) {
      // A read before the worker's first batch is its start-up baseline: kept, since reads
      // are few (smaps_rollup of a large process costs milliseconds), and the growth and
      // slope thresholds are far above what a start-up adds.
      const std::vector<MemoryPoint>& pts = wm.points;
      if (pts.size() < kCowMinPoints) continue;
      Growth g;
      g.pid = wm.pid;
      g.worker = wm.worker;
      g.first = double(pts.front().private_dirty);
      g.last = double(pts.back().private_dirty);
      g.samples_first = pts.front().samples;
      g.samples_last = pts.back().samples;
      g.rss = pts.back().rss;
      g.pss = pts.back().pss;
      auto s = slope(pts);
      if (!s) continue;
      g.slope = *s;
      if (g.samples_last - g.samples_first < kCowMinSamples) continue;
      if (g.last - g.first < kCowMinGrowthBytes || g.slope < kCowMinBytesPerSample) continue;
      growing.push_back(g);
    }
    if (growing.empty()) continue;

    // Projection: each growing worker keeps copying at its slope for the samples it has left
    // in this epoch, up to what it shares with the main process (its RSS).
    const int workers = l.config.num_workers;
    std::optional<double> per_worker_epoch;
    if (l.dataset && l.dataset->length && *l.dataset->length > 0)
      per_worker_epoch = double(*l.dataset->length) / double(workers);
    double slope_sum = 0, now_total = 0, projected_more = 0, pss_total = 0, grown = 0;
    bool projected = per_worker_epoch.has_value();
    for (const Growth& g : growing) {
      slope_sum += g.slope;
      now_total += g.last;
      grown += g.last - g.first;
      if (g.pss) pss_total += double(*g.pss);
      if (per_worker_epoch) {
        const double done = std::fmod(double(g.samples_last), *per_worker_epoch);
        double more = g.slope * std::max(0.0, *per_worker_epoch - done);
        if (g.rss) more = std::min(more, std::max(0.0, double(*g.rss) - g.last));
        projected_more += more;
      }
    }
    const double slope_mean = slope_sum / double(growing.size());
    // Workers that have not been read often enough grow as the others do.
    const double scale = double(std::max<size_t>(size_t(workers), growing.size())) /
                         double(growing.size());
    projected_more *= scale;
    const std::optional<int64_t> available = job.machine.mem_available_last_bytes
                                                 ? job.machine.mem_available_last_bytes
                                                 : job.facts.memory.available_bytes;

    std::vector<const DatasetAttr*> culprits;
    if (l.dataset)
      for (const DatasetAttr& a : l.dataset->attrs)
        if (a.python_objects) culprits.push_back(&a);

    report::Finding f;
    f.id = "cow_memory_growth";
    f.loader = l.loader;
    // What the copying costs: grown so far plus what the epoch's rest will add.
    const double basis = grown + projected_more;
    if (projected && available && projected_more >= kCowCriticalShareOfAvailable * double(*available))
      f.severity = report::Severity::kCritical;
    else if (basis >= kCowWarnProjectedBytes)
      f.severity = report::Severity::kWarning;
    else
      f.severity = report::Severity::kInfo;
    f.score = available && *available > 0 ? std::min(1.0, basis / double(*available)) : 0.1;
    f.title = "Loader " + std::to_string(l.loader) + ": " +
              count_of(double(growing.size()), "worker") + " copy the dataset as they read it (" +
              num(slope_mean * 1000 / kMiB) + " MiB more private memory per 1000 samples" +
              (culprits.empty() ? std::string(")") : ", from " + culprits[0]->name + ")");
    f.add("workers_growing", double(growing.size()));
    f.add("num_workers", double(workers));
    f.add("private_dirty_mib_per_1000_samples", slope_mean * 1000 / kMiB);
    std::string each;
    for (const Growth& g : growing) {
      if (!each.empty()) each += "; ";
      each += "worker " + std::to_string(g.worker) + " (pid " + std::to_string(g.pid) + "): " +
              num(g.first / kMiB) + " -> " + num(g.last / kMiB) + " MiB over samples " +
              std::to_string(g.samples_first) + "-" + std::to_string(g.samples_last);
    }
    f.add("private_dirty_each", each);
    f.add("private_dirty_mib_total", now_total / kMiB);
    f.add("private_dirty_grown_mib", grown / kMiB);
    if (pss_total > 0) f.add("pss_mib_total", pss_total / kMiB);
    if (projected) {
      f.add("samples_per_worker_per_epoch", *per_worker_epoch);
      f.add("projected_growth_to_epoch_end_mib", projected_more / kMiB);
    } else {
      f.add("projected_growth_to_epoch_end_mib", std::string("unknown (dataset length unknown)"));
    }
    if (available) f.add("mem_available_mib", double(*available) / kMiB);
    if (!culprits.empty()) {
      std::string names;
      for (const DatasetAttr* a : culprits) names += (names.empty() ? "" : "; ") + attr_text(*a);
      f.add("python_object_attributes", names);
    } else {
      f.add("python_object_attributes",
            std::string(l.dataset ? "none found among the dataset's attributes"
                                  : "unknown (the dataset was not inspected)"));
    }

    std::string what = culprits.empty() ? std::string("the dataset's large Python lists and dicts")
                                         : std::string();
    for (size_t i = 0; i < culprits.size() && i < 3; ++i)
      what += (i ? ", " : "") + std::string("dataset.") + culprits[i]->name;
    f.fix = "Store " + what +
            " as numpy arrays (numbers directly; strings as one np.array of fixed-width bytes "
            "or a single encoded buffer plus an offsets array), a pyarrow table, or tensors, "
            "instead of Python lists and dicts of objects: workers then read them without "
            "writing to the shared pages. Build them that way in __init__, before the workers "
            "fork.";
    f.why = "Forked workers share the main process's memory copy-on-write. Python keeps a "
            "reference count inside every object and changes it whenever the object is read, "
            "so each sample a worker reads writes to the page that holds it and the kernel "
            "copies that page into the worker (the garbage collector's passes touch the "
            "objects' pages too). Here each growing worker's Private_Dirty rose by " +
            mib(slope_mean * 1000) + " per 1000 samples read" +
            (projected ? ", about " + mib(projected_more) + " more by the end of the epoch" +
                             (available ? " against " + mib(double(*available)) + " available"
                                        : std::string())
                       : std::string()) +
            ": every worker ends up with its own copy of the objects it read, multiplied by "
            "num_workers. A numpy array, pyarrow buffer or tensor is one object whose data "
            "holds no reference counts: reading it writes nothing to the shared pages.";
    out.push_back(std::move(f));
  }
}

}  // namespace dldoctor::analyze
