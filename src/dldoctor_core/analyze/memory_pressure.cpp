// pinned_memory_pressure (seed cause 5) and ram_pressure: the job runs short of memory —
// MemAvailable low, the memory cgroup near its limit, pages swapping, tasks stalled on
// memory (PSI). With pin_memory on, the pinned copies of the batches in flight are locked
// in RAM and cannot be reclaimed, so they are the part to give back first; without it, the
// workers' own memory is. Also says (info) when pin_memory=True does nothing because there
// is no accelerator to pin for.
#include <algorithm>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {

/// MemAvailable (or the cgroup's headroom) under a tenth of the total: the kernel is
/// reclaiming the page cache the dataset reads depend on, and the next worker to grow meets
/// the OOM killer (the same cut as `dldoctor check`).
inline constexpr double kLowMemoryFraction = 0.10;

/// Swap traffic, pages per second in or out (1 MiB/s of 4 KiB pages), that costs a step:
/// every page swapped back in is a storage read on the path of whoever touches it.
inline constexpr double kSwapPagesPerS = 256.0;

/// PSI memory "some" avg10 (% of the last 10 s some task waited for memory) at which the
/// stalls are a visible share of the job's time.
inline constexpr double kMemPressurePct = 10.0;

/// Batches the main process holds pinned beside the workers' queues: the one in use.
inline constexpr int kPinnedHeldBatches = 1;

namespace {

struct Memory {
  std::optional<double> available_fraction;  ///< machine: MemAvailable / MemTotal (lowest)
  std::optional<int64_t> available_bytes;
  std::optional<double> cgroup_headroom_fraction;  ///< (limit − usage) / limit (lowest)
  std::optional<int64_t> cgroup_limit, cgroup_usage;
  std::optional<double> swap_in, swap_out, pressure;
  bool low() const {
    return (available_fraction && *available_fraction < kLowMemoryFraction) ||
           (cgroup_headroom_fraction && *cgroup_headroom_fraction < kLowMemoryFraction);
  }
  bool swapping() const {
    return (swap_in && *swap_in >= kSwapPagesPerS) || (swap_out && *swap_out >= kSwapPagesPerS);
  }
  bool pressured() const { return pressure && *pressure >= kMemPressurePct; }
};

Memory memory_of(const JobView& job) {
  Memory m;
  const auto& mem = job.facts.memory;
  m.available_bytes = job.machine.mem_available_min_bytes ? job.machine.mem_available_min_bytes
                                                          : mem.available_bytes;
  if (m.available_bytes && mem.total_bytes && *mem.total_bytes > 0)
    m.available_fraction = double(*m.available_bytes) / double(*mem.total_bytes);
  // The job's own cgroup as read while it ran, else the watcher's at the start (the same
  // one in a container).
  if (const auto& c = job.failures.cgroup_memory; c && c->limit_bytes && c->usage_bytes) {
    m.cgroup_limit = c->limit_bytes;
    m.cgroup_usage = c->usage_bytes;
  } else if (mem.cgroup_limit_bytes) {
    m.cgroup_limit = mem.cgroup_limit_bytes;
    m.cgroup_usage = mem.cgroup_working_set_bytes ? mem.cgroup_working_set_bytes
                                                  : mem.cgroup_usage_bytes;
  }
  if (m.cgroup_limit && m.cgroup_usage && *m.cgroup_limit > 0)
    m.cgroup_headroom_fraction =
        double(*m.cgroup_limit - *m.cgroup_usage) / double(*m.cgroup_limit);
  m.swap_in = job.machine.swap_in_per_s;
  m.swap_out = job.machine.swap_out_per_s;
  m.pressure = job.machine.mem_pressure_some;
  return m;
}

void add_memory_evidence(report::Finding& f, const JobView& job, const Memory& m) {
  if (m.available_bytes) f.add("mem_available_min_bytes", double(*m.available_bytes));
  if (job.facts.memory.total_bytes) f.add("mem_total_bytes", double(*job.facts.memory.total_bytes));
  if (m.cgroup_limit) f.add("cgroup_memory_limit_bytes", double(*m.cgroup_limit));
  if (m.cgroup_usage) f.add("cgroup_memory_usage_bytes", double(*m.cgroup_usage));
  if (m.cgroup_headroom_fraction) f.add("cgroup_headroom_fraction", *m.cgroup_headroom_fraction);
  if (m.swap_in) f.add("swap_in_pages_per_s", *m.swap_in);
  if (m.swap_out) f.add("swap_out_pages_per_s", *m.swap_out);
  if (m.pressure) f.add("memory_pressure_some_pct", *m.pressure);
}

std::string short_sentence(const Memory& m) {
  std::string s;
  auto add = [&](const std::string& part) { s += (s.empty() ? "" : ", ") + part; };
  if (m.available_fraction && *m.available_fraction < kLowMemoryFraction)
    add(num(*m.available_fraction * 100) + "% of RAM available");
  if (m.cgroup_headroom_fraction && *m.cgroup_headroom_fraction < kLowMemoryFraction)
    add("the memory cgroup at " + num((1 - *m.cgroup_headroom_fraction) * 100) + "% of its limit");
  if (m.swapping()) add("swapping");
  if (m.pressured()) add("tasks stalled on memory " + num(*m.pressure) + "% of the time");
  return s;
}

}  // namespace

void rule_memory_pressure(const JobView& job, std::vector<report::Finding>& out) {
  // pin_memory=True without an accelerator: torch skips pinning (and warns once).
  for (const RuntimeNote& r : job.failures.runtime) {
    if (!r.pin_memory_requested || !*r.pin_memory_requested || !r.accelerator || *r.accelerator)
      continue;
    report::Finding f;
    f.id = "pinned_memory_pressure";
    f.severity = report::Severity::kInfo;
    f.loader = r.loader;
    f.title = "pin_memory=True does nothing on this machine: there is no CUDA device";
    f.add("pin_memory", std::string("requested, not in effect"));
    f.add("accelerator", std::string("none"));
    f.fix = "Nothing to do for speed here; pin_memory=True only helps host-to-GPU copies "
            "(tensor.to('cuda', non_blocking=True)). Keep it for the GPU machines, or set it "
            "from torch.cuda.is_available().";
    f.why = "Pinned (page-locked) memory lets the GPU copy a batch by DMA while the CPU goes "
            "on. Without an accelerator torch skips pinning, so the flag costs and buys "
            "nothing.";
    out.push_back(std::move(f));
    break;  // one is enough for the job
  }

  const Memory m = memory_of(job);
  if (!m.low() && !m.swapping() && !m.pressured()) return;

  std::vector<const LoaderView*> pinned;
  bool any_stalled = false;
  for (const LoaderView& l : job.loaders) {
    if (l.config.pin_memory()) pinned.push_back(&l);
    any_stalled = any_stalled || stalled(l);
  }
  // Thrashing while the loop waits for batches is the bottleneck; low memory alone is a risk.
  const bool thrashing = (m.low() || m.pressured()) && (m.swapping() || m.pressured());
  report::Finding f;
  f.severity = thrashing && any_stalled ? report::Severity::kCritical : report::Severity::kWarning;
  f.score = thrashing ? 2.0 : 0.6;
  add_memory_evidence(f, job, m);
  const std::string state = short_sentence(m);
  if (!pinned.empty()) {
    const LoaderView& l = **std::max_element(
        pinned.begin(), pinned.end(), [](const LoaderView* a, const LoaderView* b) {
          return a->batch_bytes_mean.value_or(0) < b->batch_bytes_mean.value_or(0);
        });
    f.id = "pinned_memory_pressure";
    f.loader = pinned.size() == 1 ? l.loader : -1;
    f.title = "Memory is short (" + state + ") and pin_memory=True locks batches in RAM";
    std::optional<double> pinned_bytes;
    for (const LoaderView* p : pinned) {
      if (!p->batch_bytes_mean) continue;
      const int queued = p->config.num_workers > 0
                             ? p->config.num_workers * p->config.prefetch_factor.value_or(2)
                             : 0;
      pinned_bytes = pinned_bytes.value_or(0) +
                     *p->batch_bytes_mean * double(queued + kPinnedHeldBatches);
    }
    if (pinned_bytes) f.add("pinned_bytes_estimate", *pinned_bytes);
    if (l.batch_bytes_mean) f.add("batch_bytes", *l.batch_bytes_mean);
    f.add("num_workers", double(l.config.num_workers));
    if (l.config.prefetch_factor) f.add("prefetch_factor", double(*l.config.prefetch_factor));
    f.fix = "Set pin_memory=False" + std::string(pinned.size() == 1 ? "" : " on the largest "
            "loaders") + " (the copy to the GPU then costs a little more, but the memory can be "
            "reclaimed), or keep fewer batches pinned: prefetch_factor=1" +
            (l.config.num_workers > 1 ? ", num_workers=" +
                                            std::to_string(std::max(1, l.config.num_workers / 2))
                                      : std::string()) +
            ". Or give the job more memory (docker run --memory, Kubernetes "
            "resources.limits.memory).";
    f.why = "With pin_memory=True the main process copies every batch into page-locked "
            "memory, which the kernel can neither swap nor reclaim; about " +
            (pinned_bytes ? bytes_text(*pinned_bytes) : std::string("a batch per slot")) +
            " stays pinned with the batches in flight. When memory is short the rest of the "
            "job (page cache, the workers) is pushed out instead, and steps stall on swap "
            "and reclaim.";
  } else {
    f.id = "ram_pressure";
    f.loader = -1;
    f.title = "Memory is short (" + state + ")";
    f.fix = "Find what holds the memory (the workers: see their RSS in the report; a "
            "dataset held in Python lists or dicts grows in every worker, see "
            "cow_memory_growth). Use fewer workers or a smaller prefetch_factor, keep the "
            "dataset's index in numpy arrays, or give the job more memory (docker run "
            "--memory, Kubernetes resources.limits.memory).";
    f.why = "When MemAvailable or the cgroup's headroom runs low the kernel reclaims the page "
            "cache the dataset reads from and swaps, so reads go to storage and steps stall; "
            "at the limit the OOM killer kills the largest process, usually a worker.";
  }
  out.push_back(std::move(f));
}

}  // namespace dldoctor::analyze
