// io_bound (seed cause 4): the loop waits and the workers spend most of each fetch off-CPU,
// waiting for storage, the network or a pipe. Off-CPU time inside fetch is the proof;
// storage reads, io pressure and a network filesystem say what the workers wait for.
#include <algorithm>
#include <cctype>
#include <cmath>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {

/// Storage reads (read_bytes) per second, all workers together, above which the waits are
/// credited to the device. Below 1 MB/s a disk is idle whatever the workers wait for.
inline constexpr double kStorageReadBytesPerS = 1e6;

/// Share of the bytes read (rchar) that came from the device (read_bytes) for the reads to
/// count as storage reads; below it the page cache serves most of them and the device is
/// not what the workers wait for.
inline constexpr double kStorageShare = 0.5;

/// The data may take at most this share of available memory to be worth caching in RAM:
/// the job and the page cache need the rest.
inline constexpr double kCacheFitShare = 0.5;

/// Lower bound on the on-CPU share when sizing workers by the CPUs they would use: below
/// 5 % the measure is noise, and a worker still costs memory and a process.
inline constexpr double kMinOnCpuForSizing = 0.05;

namespace {
std::string mb(double bytes) { return num(bytes / 1e6); }
std::string gb(double bytes) { return num(bytes / 1e9); }
}  // namespace

void rule_io_bound(const JobView& job, std::vector<report::Finding>& out) {
  const auto usable = job.usable_cpus();
  for (const LoaderView& l : job.loaders) {
    auto s = shortfall(l);
    if (!s || !s->busy || *s->busy >= kCpuBoundFraction) continue;
    const FetchCapacity& c = s->capacity;
    const double stall = *l.data_stall_fraction;
    const double busy = *s->busy;
    const double on_cpu = l.on_cpu_fraction.value_or(busy);

    // Without run-queue delay, more workers than CPUs could also explain off-CPU time.
    const bool contention_unknown = !l.fetchers.runq_delay_pct && !job.all_workers.runq_delay_pct;
    const bool may_be_contention =
        contention_unknown &&
        (!usable || !job.total_workers || double(*job.total_workers) > *usable);

    const std::optional<double> reads = l.fetchers.read_bytes_per_s;
    const std::optional<double> rchar = l.fetchers.rchar_per_s;
    const bool from_storage = reads && *reads >= kStorageReadBytesPerS &&
                              (!rchar || *rchar <= 0 || *reads / *rchar >= kStorageShare);
    const bool network = job.data_storage && job.data_storage->network_fs;
    std::optional<double> io_pressure = job.machine.io_pressure_some;
    if (!io_pressure) io_pressure = job.facts.io_pressure_some_avg10;

    report::Finding f;
    f.id = "io_bound";
    f.severity = may_be_contention ? report::Severity::kWarning : report::Severity::kCritical;
    f.loader = l.loader;
    f.score = stall * (1.0 - busy);
    std::string waits_on = network        ? "a network filesystem"
                           : from_storage ? "storage reads"
                                          : "I/O (not local storage: a socket, a pipe, a lock "
                                            "or a sleep)";
    f.title = "Loader " + std::to_string(l.loader) + ": workers wait on " + waits_on +
              " for " + num((1.0 - busy) * 100) + "% of each fetch and cannot keep up";
    add_fetch_evidence(f, job, l, *s);
    if (reads) f.add("storage_read_mb_per_s", *reads / 1e6);
    if (rchar) f.add("all_read_mb_per_s", *rchar / 1e6);
    if (io_pressure) f.add("io_pressure_some_pct", *io_pressure);
    if (job.data_storage) {
      if (!job.data_storage->fs_type.empty()) f.add("data_fs_type", job.data_storage->fs_type);
      f.add("data_network_fs", network ? 1.0 : 0.0);
      if (job.data_storage->read_mb_s)
        f.add("data_read_probe_mb_per_s", *job.data_storage->read_mb_s);
    }

    // Workers: enough to overlap the waits, bounded by the CPUs their compute share needs.
    const int now = l.config.num_workers;
    int want = workers_for(c.demand_bps, c.fetch_s);
    std::optional<int> cpu_cap;
    if (usable)
      cpu_cap = std::max(1, int(std::floor(std::max(1.0, std::floor(*usable) - 1) /
                                           std::max(on_cpu, kMinOnCpuForSizing))));
    if (cpu_cap) want = std::min(want, *cpu_cap);
    std::vector<std::string> fixes;
    if (want > now) {
      f.add("recommended_num_workers", double(want));
      std::string w =
          "Set num_workers=" + std::to_string(want) + " (now " + std::to_string(now) + ")";
      if (usable && want > *usable)
        w += ": more workers than the " + count_of(*usable, "usable CPU") +
             " is right here, because each computes only " + num(on_cpu * 100) +
             "% of the time";
      fixes.push_back(w);
    }
    // Where the bytes could come from instead.
    std::optional<int64_t> avail = job.machine.mem_available_min_bytes;
    if (!avail) avail = job.facts.memory.available_bytes;
    std::optional<int64_t> data_bytes;
    if (job.data_storage && job.data_storage->bytes && !job.data_storage->count_truncated)
      data_bytes = job.data_storage->bytes;
    if (data_bytes) f.add("data_bytes", double(*data_bytes));
    if (avail) f.add("mem_available_bytes", double(*avail));
    if (data_bytes && avail && double(*data_bytes) <= kCacheFitShare * double(*avail)) {
      fixes.push_back("cache the data in RAM: it is " + gb(double(*data_bytes)) + " GB and " +
                      gb(double(*avail)) +
                      " GB are available (copy it to /dev/shm or a local tmpfs, or load it "
                      "into memory once at start)");
    } else if (network) {
      fixes.push_back("copy the data from " + job.data_storage->fs_type +
                      " to a local SSD before training");
    } else if (from_storage) {
      fixes.push_back(std::string("move the data to faster storage (a local NVMe/SSD") +
                      (job.data_storage && job.data_storage->rotational.value_or(false)
                           ? ": it is on a rotational disk now)"
                           : ")") +
                      ", or store it in fewer, larger files read sequentially");
    }
    const int pf = l.config.prefetch_factor.value_or(2);
    if (now > 0)
      fixes.push_back("raise prefetch_factor to " + std::to_string(std::max(4, 2 * pf)) +
                      " (now " + std::to_string(pf) + ") to ride out slow reads");
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
            num(on_cpu * 100) + "% of each fetch: they wait on " + waits_on +
            (from_storage ? " (" + mb(*reads) + " MB/s from the device" +
                                (rchar ? " of " + mb(*rchar) + " MB/s read" : std::string()) + ")"
                          : std::string()) +
            " instead of computing. This is the opposite of too_many_workers, where workers "
            "compute and more of them than cores only queue for a CPU: here the workers wait "
            "instead of computing, so more workers than cores overlap those waits without "
            "competing for CPU, and faster or cached storage shortens each wait.";
    if (may_be_contention)
      f.why += " Run-queue delay could not be read and the workers may outnumber the CPUs, "
               "so part of the off-CPU time may be queueing for a CPU.";
    out.push_back(std::move(f));
  }
}

}  // namespace dldoctor::analyze
