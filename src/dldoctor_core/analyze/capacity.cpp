// Capacity against demand, and compute against wait, for the fetch rules.
#include "dldoctor_core/analyze/capacity.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string_view>

#include "dldoctor_core/analyze/code_owner.hpp"
#include "dldoctor_core/analyze/rules/uneven_worker_split.hpp"

namespace dldoctor::analyze {

std::optional<FetchCapacity> fetch_capacity(const LoaderView& l) noexcept {
  if (!l.fetch_mean_s || !l.demand_step_s || *l.fetch_mean_s <= 0) return std::nullopt;
  FetchCapacity c;
  c.fetch_s = *l.fetch_mean_s;
  c.fetch_processes = l.fetch_processes();
  c.serial = l.config.num_workers == 0;
  c.active_processes = l.active_fetch_processes();
  c.capacity_bps = c.active_processes / c.fetch_s;
  // A consumer step of ~0 (a loop that only iterates) wants batches as fast as possible.
  c.demand_bps = *l.demand_step_s > 1e-9 ? 1.0 / *l.demand_step_s : 1e9;
  return c;
}

std::optional<Shortfall> shortfall(const LoaderView& l) noexcept {
  if (!stalled(l)) return std::nullopt;
  const bool serial = l.config.num_workers == 0;
  if (auto cap = fetch_capacity(l)) {
    if (!cap->short_of_demand()) return std::nullopt;
    return Shortfall{*cap, busy_fraction(l), std::nullopt, serial};
  }
  // No batch was timed (attach): the stacks prove it or nothing does.
  if (!l.stacks || !never_idle(*l.stacks)) return std::nullopt;
  return Shortfall{std::nullopt, busy_fraction(l), l.stacks, serial};
}

bool never_idle(const StackShares& s) noexcept {
  return s.fetch_samples >= kMinStackSamples && s.idle < kStackIdleShare;
}

std::vector<CpuBoundFetch> cpu_bound_fetches(const JobView& job, bool oversubscribed) {
  std::vector<CpuBoundFetch> out;
  for (const LoaderView& l : job.loaders) {
    auto s = shortfall(l);
    if (!s || (s->busy && *s->busy < kCpuBoundFraction)) continue;  // io_bound's
    const int needed =
        s->capacity ? workers_for(s->capacity->demand_bps, s->capacity->fetch_s)
                    : workers_for_stall(l.fetch_processes(), l.data_stall_fraction.value_or(0));
    out.push_back({fetch_figures(job, l, *s), l.collate_share, l.config.custom_collate(),
                   l.hot_functions, oversubscribed, needed, cpu_worker_ceiling(job, l)});
  }
  return out;
}

namespace {

/// Mean cores a set of processes used at once over a stretch of `passes` sampler passes.
std::optional<double> cores(const ProcAgg& a, int passes) noexcept {
  if (!a.cpu_pct || a.samples <= 0) return std::nullopt;
  if (passes > 0) return *a.cpu_pct / 100.0 * double(a.samples) / double(passes);
  double sum = 0;
  for (const auto& [pid, pct] : a.cpu_pct_each) sum += pct / 100.0;
  return sum;
}

}  // namespace

int CpuBudget::workers() const noexcept {
  const double fit = left() / std::max(per_worker, 1e-3);
  const double whole = std::floor(fit + 1e-9);
  return int(std::clamp(whole + (fit - whole >= kMinWorkerShare - 1e-9 ? 1.0 : 0.0), 1.0, 1e6));
}

std::optional<CpuBudget> cpu_budget(const JobView& job, const LoaderView* l) noexcept {
  auto usable = job.usable_cpus();
  if (!usable) return std::nullopt;
  const JobView::CpuUse& use =
      job.cpu_use.main_process.samples > 0
          ? job.cpu_use
          : JobView::CpuUse{job.main_process, job.all_workers, job.machine};
  const int passes = use.machine.passes;
  CpuBudget b;
  b.usable = *usable;
  b.main_processes = std::max(1, use.main_process.processes);
  const auto main = cores(use.main_process, passes);
  b.main_measured = main.has_value();
  b.main_cores = main.value_or(double(b.main_processes * kMainProcessCores));
  // Everything the machine runs less the job is other processes' only when the job may use
  // every CPU of the machine: with a narrower affinity or quota, machine busy spans CPUs the
  // job cannot use.
  const auto& cpu = job.facts.cpu;
  if (main && use.machine.cpu_busy_pct && cpu.online && *usable >= double(*cpu.online) - 1e-9) {
    const double job_cores = *main + cores(use.workers, passes).value_or(0);
    b.other_cores = std::max(0.0, *use.machine.cpu_busy_pct / 100.0 * *cpu.online - job_cores);
  }
  if (l != nullptr) {
    for (const LoaderView& o : job.loaders)
      if (o.loader != l->loader && o.config.num_workers > 0)
        b.other_loaders_cores += cores(o.fetchers, 0).value_or(0);
    b.per_worker = std::clamp(busy_fraction(*l).value_or(1.0), 0.05, 1.0);
    // num_workers=0: the main process's CPU includes the fetch itself, which workers take over.
    if (l->config.num_workers == 0 && main && l->data_stall_fraction)
      b.main_cores = std::max(0.0, b.main_cores - *l->data_stall_fraction * b.per_worker);
  }
  return b;
}

std::string cpu_budget_text(const CpuBudget& b) {
  std::string s = b.main_processes == 1
                      ? std::string("the main process ")
                      : "the " + std::to_string(b.main_processes) + " main processes ";
  s += b.main_measured ? std::string(b.main_processes == 1 ? "uses " : "use ") + num(b.main_cores)
                       : "are assumed to use " + num(b.main_cores) + " (not measured)";
  s += " of the " + count_of(b.usable, "usable CPU");
  if (b.other_cores) s += ", other processes " + num(*b.other_cores);
  if (b.other_loaders_cores > 0)
    s += ", the job's other loaders' workers " + num(b.other_loaders_cores);
  return s + ", which leaves " + num(b.left()) + " for workers, each using " + num(b.per_worker) +
         " while it fetches";
}

std::optional<int> cpu_worker_ceiling(const JobView& job, const LoaderView& l) noexcept {
  auto b = cpu_budget(job, &l);
  if (!b) return std::nullopt;
  // Other processes' use unknown: queueing for a CPU says someone uses the "idle" ones.
  if (!b->other_cores && cpu_contended(job, l).value_or(false)) return std::nullopt;
  const int n = b->workers();
  if (n <= l.config.num_workers) return std::nullopt;
  return n;
}

FetchFigures fetch_figures(const JobView& job, const LoaderView& l, const Shortfall& s) {
  int configured = 0;
  for (const LoaderView& o : job.loaders) configured += std::max(0, o.config.num_workers);
  return {.loader = l.loader,
          .data_stall_fraction = l.data_stall_fraction.value_or(0),
          .num_workers = l.config.num_workers,
          .uneven_split = uneven_worker_split::uneven(l),
          .shortfall = s,
          .getitem_p50_ms = l.getitem_p50_ms,
          .getitem_p99_ms = l.getitem_p99_ms,
          .collate_p50_ms = l.collate_p50_ms,
          .fetch_p50_ms = l.fetch_p50_ms,
          .samples_per_batch = l.samples_per_batch,
          .consumer_batches_per_s = l.batches_per_s,
          .on_cpu_fraction = l.on_cpu_fraction,
          .worker_cpu_pct = l.fetchers.cpu_pct,
          .run_queue_delay_pct = l.fetchers.runq_delay_pct,
          .usable_cpus = job.usable_cpus(),
          .total_workers = job.total_workers,
          .configured_workers = configured,
          .budget = cpu_budget(job, &l),
          .gpu = gpu_idle(job)};
}

std::string no_cpu_for_more_workers(const FetchFigures& x) {
  if (x.uneven_split)
    return "More workers would not help while the IterableDataset leaves workers without data "
           "(see uneven_worker_split): give each a share first; and ";
  if (!x.budget) return "More workers would not help (no CPU is spare for them): ";
  std::string s = cpu_budget_text(*x.budget);
  s[0] = char(std::toupper(static_cast<unsigned char>(s[0])));
  if (x.budget->workers() > x.num_workers)  // the budget allows more, the queueing does not
    return s +
           "; but the workers queue for a CPU and other processes' use could not be "
           "measured, so more workers would not help: ";
  return s + ": " + count_of(x.configured_workers, "worker") +
         (x.configured_workers == 1 ? " already uses" : " already use") +
         " what is left, so more workers would not help: ";
}

std::string no_more_workers(const CpuBoundFetch& c) {
  const FetchFigures& x = c.figures;
  if (!c.beyond_worker_handouts()) return no_cpu_for_more_workers(x);
  const std::string per_batch =
      x.samples_per_batch ? " (now " + num(*x.samples_per_batch) + ")" : std::string();
  return "Workers would not help: the loop wants " +
         num(x.shortfall.capacity->demand_bps) +
         " batches/s, and each batch from a worker process crosses to the main process "
         "through a queue (pickled, its tensors as shared-memory handles) for tens to "
         "hundreds of microseconds, so workers hand over at most about " +
         num(kMaxWorkerHandoutsPerS) +
         " batches/s. Put more samples in each batch instead: a larger batch_size" + per_batch +
         " asks for fewer batches for the same data; and ";
}

void add_fetch_evidence(report::Finding& f, const FetchFigures& x) {
  const Shortfall& s = x.shortfall;
  f.add("data_stall_fraction", x.data_stall_fraction);
  f.add("num_workers", double(x.num_workers));
  if (x.getitem_p50_ms) f.add("getitem_p50_ms", *x.getitem_p50_ms);
  if (x.getitem_p99_ms) f.add("getitem_p99_ms", *x.getitem_p99_ms);
  if (x.collate_p50_ms) f.add("collate_p50_ms", *x.collate_p50_ms);
  if (x.fetch_p50_ms) f.add("fetch_p50_ms", *x.fetch_p50_ms);
  if (x.samples_per_batch) f.add("samples_per_batch", *x.samples_per_batch);
  if (s.capacity) {
    f.add("worker_capacity_batches_per_s", s.capacity->capacity_bps);
    f.add("consumer_demand_batches_per_s", s.capacity->demand_bps);
  } else {
    // Attached without the hooks: no batch was timed, and nothing is guessed for it.
    const std::string unknown = "unknown";
    f.add("getitem_p50_ms", unknown);
    f.add("worker_capacity_batches_per_s", unknown);
    f.add("consumer_demand_batches_per_s", unknown);
    f.add("consumer_batches_per_s", unknown);
  }
  if (x.consumer_batches_per_s) f.add("consumer_batches_per_s", *x.consumer_batches_per_s);
  if (const auto& st = s.stacks) {
    f.add("stack_samples_main", double(st->main_samples));
    f.add("stack_samples_fetch", double(st->fetch_samples));
    f.add("stack_getitem_share", st->getitem);
    f.add("stack_collate_share", st->collate);
    f.add("stack_reading_share", st->reading);
    f.add("stack_idle_share", st->idle);
    if (st->failed_samples > 0) f.add("stack_samples_failed", double(st->failed_samples));
  }
  if (s.busy)
    f.add("worker_on_cpu_fraction", x.on_cpu_fraction.value_or(*s.busy));
  else
    f.add("worker_on_cpu_fraction", std::string("unknown"));
  if (x.worker_cpu_pct) f.add("worker_cpu_pct", *x.worker_cpu_pct);
  if (x.run_queue_delay_pct) f.add("run_queue_delay_pct", *x.run_queue_delay_pct);
  if (x.usable_cpus) f.add("usable_cpus", *x.usable_cpus);
  if (x.total_workers) f.add("total_workers", double(*x.total_workers));
  if (x.budget) {
    if (x.budget->main_measured) f.add("main_process_cpu_cores", x.budget->main_cores);
    if (x.budget->other_cores) f.add("other_processes_cpu_cores", *x.budget->other_cores);
    f.add("cpu_left_for_workers", x.budget->left());
  }
  add_gpu_idle_evidence(f, x.gpu, x.data_stall_fraction);
}

std::optional<double> busy_fraction(const LoaderView& l) noexcept {
  std::optional<double> on_cpu = l.on_cpu_fraction;
  // Without thread CPU time on the events, a worker's process CPU % is the same figure
  // while the loader is stalled: the workers then always have a batch to fetch.
  if (!on_cpu && l.fetchers.cpu_pct) on_cpu = *l.fetchers.cpu_pct / 100.0;
  if (!on_cpu) return std::nullopt;
  double busy = *on_cpu;
  // Runnable but waiting for a CPU is still wanting to compute: under contention the
  // on-CPU share alone would make CPU-bound workers look like they wait for I/O.
  if (l.fetchers.runq_delay_pct) busy += *l.fetchers.runq_delay_pct / 100.0;
  return std::clamp(busy, 0.0, 1.0);
}

std::optional<bool> cpu_contended(const JobView& job, const LoaderView& l) noexcept {
  std::optional<double> runq = job.all_workers.runq_delay_pct;
  if (!runq) runq = l.fetchers.runq_delay_pct;
  if (!runq) return std::nullopt;
  return *runq >= kFreeCpuRunQueuePct;
}

int workers_for(double demand_bps, double fetch_s) noexcept {
  double n = std::ceil(demand_bps * fetch_s * kWorkerHeadroom - 1e-9);
  return int(std::clamp(n, 1.0, 1e6));
}

int workers_for_stall(int processes, double stall) noexcept {
  // A stall near 1 says the consumer barely runs: the factor is then bounded, not infinite.
  const double consumer_share = std::max(0.01, 1.0 - std::clamp(stall, 0.0, 1.0));
  double n = std::ceil(std::max(1, processes) / consumer_share * kWorkerHeadroom - 1e-9);
  return int(std::clamp(n, 1.0, 1e6));
}

std::string supply_text(const FetchFigures& x) {
  const Shortfall& s = x.shortfall;
  const int n = s.capacity ? s.capacity->fetch_processes : std::max(1, x.num_workers);
  std::string who = s.serial ? std::string("the main process") : count_of(n, "worker");
  if (s.capacity && s.capacity->active_processes < n - 0.05)
    who += " (" + num(s.capacity->active_processes) + " with data, on average)";
  const bool one = s.serial || n == 1;
  if (s.capacity)
    return who + (one ? " supplies " : " supply ") + num(s.capacity->capacity_bps) +
           " batches/s, the loop wants " + num(s.capacity->demand_bps);
  const double busy = s.stacks ? 1.0 - s.stacks->idle : 1.0;
  return who + (one ? " is" : " are") + " fetching in " + num(busy * 100) +
         "% of the stack samples while the loop waits " + num(x.data_stall_fraction * 100) +
         "% of the time";
}

std::string supply_of(int n, const FetchFigures& x) {
  if (const auto& c = x.shortfall.capacity)
    return std::to_string(n) + " workers at " + num(c->fetch_s * 1e3) + " ms per batch supply " +
           num(n / c->fetch_s) + " batches/s, above the loop's " + num(c->demand_bps);
  const int now = std::max(1, x.num_workers);
  const double factor = 1.0 / std::max(0.01, 1.0 - x.data_stall_fraction);
  const bool one = x.shortfall.serial || now == 1;
  return "the loop waits " + num(x.data_stall_fraction * 100) + "% of the time, so it asks for " +
         num(factor) + "x what " +
         (x.shortfall.serial ? std::string("the main process") : count_of(now, "worker")) +
         (one ? " supplies now" : " supply now");
}

std::string hot_functions_text(const std::vector<HotFunction>& hot, size_t n) {
  std::string out;
  for (size_t i = 0; i < hot.size() && i < n; ++i) {
    const HotFunction& h = hot[i];
    if (!out.empty()) out += "; ";
    out.append(h.name);
    if (!h.location.empty()) out.append(" (").append(h.location).append(")");
    if (h.calls > 0)
      out.append(" ")
          .append(num(h.cumulative_ms / double(h.calls)))
          .append(" ms/call, ")
          .append(num(h.cumulative_ms))
          .append(" ms in ")
          .append(std::to_string(h.calls))
          .append(" calls");
    else
      out.append(" ").append(num(h.cumulative_ms)).append(" ms");
  }
  return out;
}

namespace {
bool has(const std::string& lower, std::initializer_list<const char*> words) {
  for (const char* w : words)
    if (lower.find(w) != std::string::npos) return true;
  return false;
}
}  // namespace

const HotFunction* hottest_step(const std::vector<HotFunction>& hot) noexcept {
  static constexpr const char* kWrappers[] = {
      "__getitem__", "__getitems__", "__call__",  "fetch",   "_call_impl", "forward",
      "<lambda>",    "<listcomp>",   "<genexpr>", "wrapper", "<module>"};
  double total = 0;
  for (const HotFunction& h : hot) total = std::max(total, h.cumulative_ms);
  if (total <= 0) return nullptr;
  auto first_step = [&](bool own_code_only) -> const HotFunction* {
    for (const HotFunction& h : hot) {  // hot is hottest first
      if (h.cumulative_ms < kHotStepShare * total) break;
      if (own_code_only && (h.location.empty() || owner_of(h.location) != Owner::kUser))
        continue;
      bool wrapper = false;
      for (const char* w : kWrappers) {
        const std::string_view n(h.name), ws(w);
        // "Compose.__call__" counts as "__call__": compare the last dotted part.
        const size_t dot = n.rfind('.');
        if ((dot == std::string_view::npos ? n : n.substr(dot + 1)) == ws) wrapper = true;
      }
      if (!wrapper) return &h;
    }
    return nullptr;
  };
  // The job's own code first: an installed package's frames around it (Hugging Face
  // datasets' formatting that calls a set_transform function, say) are hotter than the
  // user's function that does the work, and no advice can change them.
  if (const HotFunction* own = first_step(true)) return own;
  if (const HotFunction* any = first_step(false)) return any;
  const HotFunction* most_self = nullptr;
  for (const HotFunction& h : hot)
    if (h.self_ms && (!most_self || *h.self_ms > *most_self->self_ms)) most_self = &h;
  return most_self;
}

std::string hot_step_advice(const std::string& name) {
  std::string s = name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  if (has(s, {"resize", "rescale", "thumbnail", "scale"}))
    return "resize the images once, offline, and save them at training size, so each worker "
           "only decodes a small image; or use Pillow-SIMD for the resize";
  if (has(s, {"decode", "imread", "jpeg", "jpg", "png", "open", "load", "convert", "read"}))
    return "store the images at training size, decode JPEGs at reduced size with PIL's "
           "Image.draft('RGB', size), or decode with torchvision.io.decode_jpeg (nvJPEG on "
           "the GPU)";
  if (has(s, {"augment", "transform", "rotate", "affine", "crop", "flip", "blur", "color",
              "normalize", "jitter"}))
    return "apply this augmentation on the GPU to the whole batch (torchvision.transforms.v2 "
           "on CUDA tensors), or precompute its deterministic part offline; Pillow-SIMD speeds "
           "up PIL-based transforms";
  if (has(s, {"tokeniz", "encode"}))
    return "tokenize the corpus once, offline, and store the token ids";
  return "precompute its result once, offline, and store it, or replace it with a vectorised "
         "or native implementation";
}

}  // namespace dldoctor::analyze
