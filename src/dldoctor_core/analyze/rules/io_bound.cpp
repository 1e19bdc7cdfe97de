// Workers that wait are not competing for CPUs: more of them than cores overlap the waits,
// up to the CPUs their compute share needs; faster or cached storage shortens each wait.
#include "dldoctor_core/analyze/rules/io_bound.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>

namespace dldoctor::analyze::io_bound {

namespace {
std::string mb(double bytes) { return num(bytes / 1e6); }
std::string gb(double bytes) { return num(bytes / 1e9); }
}  // namespace

std::vector<Evidence> detect(const JobView& job) {
  const auto usable = job.usable_cpus();
  std::vector<Evidence> out;
  for (const LoaderView& l : job.loaders) {
    auto s = shortfall(l);
    if (!s || !s->busy || *s->busy >= kCpuBoundFraction) continue;
    Evidence e;
    e.fetch = fetch_figures(job, l, *s);
    e.busy = *s->busy;
    e.on_cpu = l.on_cpu_fraction.value_or(e.busy);

    // Without run-queue delay, more workers than CPUs could also explain off-CPU time.
    const bool contention_unknown = !l.fetchers.runq_delay_pct && !job.all_workers.runq_delay_pct;
    e.may_be_contention = contention_unknown &&
                          (!usable || !job.total_workers || double(*job.total_workers) > *usable);
    e.rank = {e.may_be_contention ? report::Severity::kWarning : report::Severity::kCritical,
              report::Tier::kMeasure, e.fetch.data_stall_fraction * (1.0 - e.busy)};

    e.read_bytes_per_s = l.fetchers.read_bytes_per_s;
    e.rchar_per_s = l.fetchers.rchar_per_s;
    const auto& reads = e.read_bytes_per_s;
    const auto& rchar = e.rchar_per_s;
    e.from_storage = reads && *reads >= kStorageReadBytesPerS &&
                     (!rchar || *rchar <= 0 || *reads / *rchar >= kStorageShare);
    e.storage = job.data_storage;
    e.network = job.data_storage && job.data_storage->network_fs;
    e.io_pressure_pct = job.machine.io_pressure_some;
    if (!e.io_pressure_pct) e.io_pressure_pct = job.facts.io_pressure_some_avg10;

    // Workers: enough to overlap the waits, bounded by the CPUs their compute share needs.
    int want = s->capacity ? workers_for(s->capacity->demand_bps, s->capacity->fetch_s)
                           : workers_for_stall(l.fetch_processes(), e.fetch.data_stall_fraction);
    if (usable)
      want = std::min(
          want, std::max(1, int(std::floor(std::max(1.0, std::floor(*usable) - kMainProcessCores) /
                                           std::max(e.on_cpu, kMinOnCpuForSizing)))));
    if (want > l.config.num_workers && !e.fetch.uneven_split) e.recommended_workers = want;
    e.usable_cpus = usable;
    // Where the bytes could come from instead.
    e.mem_available = job.machine.mem_available_min_bytes;
    if (!e.mem_available) e.mem_available = job.facts.memory.available_bytes;
    if (job.data_storage && job.data_storage->bytes && !job.data_storage->count_truncated)
      e.data_bytes = job.data_storage->bytes;
    e.fits_in_ram = e.data_bytes && e.mem_available &&
                    double(*e.data_bytes) <= kCacheFitFraction * double(*e.mem_available);
    e.prefetch_factor = l.config.prefetch_factor.value_or(kDefaultPrefetchFactor);
    if (s->stacks && !l.hot_functions.empty()) e.waiting_in = hot_functions_text(l.hot_functions);
    out.push_back(std::move(e));
  }
  return out;
}

report::Finding finding(const Evidence& e) {
  const FetchFigures& x = e.fetch;
  const double stall = x.data_stall_fraction;
  const auto& reads = e.read_bytes_per_s;
  const auto& rchar = e.rchar_per_s;

  report::Finding f = report::make_finding("io_bound", x.loader, e.rank);
  std::string waits_on = e.network        ? "a network filesystem"
                         : e.from_storage ? "storage reads"
                                          : "I/O (not local storage: a socket, a pipe, a lock "
                                            "or a sleep)";
  f.title = "Loader " + std::to_string(x.loader) + ": workers wait on " + waits_on + " for " +
            num((1.0 - e.busy) * 100) + "% of each fetch and cannot keep up" +
            (x.shortfall.capacity ? std::string() : " (" + supply_text(x) + ")");
  add_fetch_evidence(f, x);
  if (reads) f.add("storage_read_mb_per_s", *reads / 1e6);
  if (rchar) f.add("all_read_mb_per_s", *rchar / 1e6);
  if (e.io_pressure_pct) f.add("io_pressure_some_pct", *e.io_pressure_pct);
  if (!e.waiting_in.empty()) f.add("hot_functions", e.waiting_in);
  if (e.storage) {
    if (!e.storage->fs_type.empty()) f.add("data_fs_type", e.storage->fs_type);
    f.add("data_network_fs", e.network ? 1.0 : 0.0);
    if (e.storage->read_mb_s) f.add("data_read_probe_mb_per_s", *e.storage->read_mb_s);
  }

  const int now = x.num_workers;
  std::vector<std::string> fixes;
  if (x.uneven_split)
    fixes.push_back("give every worker a share of the data first (see uneven_worker_split): "
                    "more workers would idle too");
  if (e.recommended_workers > 0) {
    const int want = e.recommended_workers;
    f.add("recommended_num_workers", double(want));
    std::string w =
        "Set num_workers=" + std::to_string(want) + " (now " + std::to_string(now) + ")";
    if (e.usable_cpus && want > *e.usable_cpus)
      w += ": more workers than the " + count_of(*e.usable_cpus, "usable CPU") +
           " is right here, because each computes only " + num(e.on_cpu * 100) + "% of the time";
    fixes.push_back(w);
  }
  if (e.data_bytes) f.add("data_bytes", double(*e.data_bytes));
  if (e.mem_available) f.add("mem_available_bytes", double(*e.mem_available));
  if (e.fits_in_ram) {
    fixes.push_back("cache the data in RAM: it is " + gb(double(*e.data_bytes)) + " GB and " +
                    gb(double(*e.mem_available)) +
                    " GB are available (copy it to /dev/shm or a local tmpfs, or load it "
                    "into memory once at start)");
  } else if (e.network) {
    fixes.push_back("copy the data from " + e.storage->fs_type + " to a local SSD before training");
  } else if (e.from_storage) {
    fixes.push_back(std::string("move the data to faster storage (a local NVMe/SSD") +
                    (e.storage && e.storage->rotational.value_or(false)
                         ? ": it is on a rotational disk now)"
                         : ")") +
                    ", or store it in fewer, larger files read sequentially");
  }
  const int pf = e.prefetch_factor;
  if (now > 0)
    fixes.push_back("raise prefetch_factor to " + std::to_string(std::max(4, 2 * pf)) + " (now " +
                    std::to_string(pf) + ") to ride out slow reads");
  if (fixes.empty()) fixes.push_back("find what the workers wait for inside __getitem__");
  for (size_t i = 0; i < fixes.size(); ++i) {
    std::string part = fixes[i];
    if (i > 0) part[0] = char(std::tolower(static_cast<unsigned char>(part[0])));
    f.fix += (i == 0 ? "" : (i + 1 == fixes.size() ? "; and " : "; ")) + part;
  }
  if (!f.fix.empty()) f.fix[0] = char(std::toupper(static_cast<unsigned char>(f.fix[0])));
  f.fix += ".";

  f.why = "The main process waits " + num(stall * 100) +
          "% of the loop for batches, and the workers are on a CPU for only " +
          num(e.on_cpu * 100) + "% of each fetch: they wait on " + waits_on +
          (e.from_storage ? " (" + mb(*reads) + " MB/s from the device" +
                                (rchar ? " of " + mb(*rchar) + " MB/s read" : std::string()) + ")"
                          : std::string()) +
          " instead of computing. This is the opposite of too_many_workers, where workers "
          "compute and more of them than cores only queue for a CPU: here the workers wait "
          "instead of computing, so more workers than cores overlap those waits without "
          "competing for CPU, and faster or cached storage shortens each wait.";
  if (e.may_be_contention)
    f.why +=
        " Run-queue delay could not be read and the workers may outnumber the CPUs, "
        "so part of the off-CPU time may be queueing for a CPU.";
  return f;
}

}  // namespace dldoctor::analyze::io_bound
