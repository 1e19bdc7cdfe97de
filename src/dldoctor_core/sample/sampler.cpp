#include "dldoctor_core/sample/sampler.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/sample/gpu_reader.hpp"
#include "dldoctor_core/sample/machine_reader.hpp"
#include "dldoctor_core/sample/process_reader.hpp"
#include "dldoctor_core/sample/process_tree.hpp"
#include "dldoctor_core/sample/stat.hpp"

namespace dldoctor::sample {
namespace {

int default_kept_fds() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return 1024;
  return int(std::min<rlim_t>(lim.rlim_cur / 4, 1024));
}

void require_process(int pid) {
  if (pid <= 0) {
    throw Error("cannot sample pid " + std::to_string(pid) + ": a pid is a positive number");
  }
  char path[48];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  ReadBuffer buf(1024);
  auto text = read_whole(path, buf);
  if (!text || !parse_stat(*text)) {
    throw Error("cannot sample pid " + std::to_string(pid) +
                ": no such process (it has exited, or /proc is not mounted)");
  }
}

SamplerOptions checked(SamplerOptions o) {
  if (o.interval_ns <= 0) throw Error("sampler interval must be positive");
  if (o.smaps_every < 1) throw Error("smaps_every must be at least 1");
  if (o.capacity < 1) throw Error("sampler history capacity must be at least 1");
  if (o.max_kept_fds < 0) o.max_kept_fds = default_kept_fds();
  return o;
}

}  // namespace

struct Sampler::State {
  explicit State(SamplerOptions o) : options(o), budget(o.max_kept_fds) {}

  const SamplerOptions options;

  // The pass: everything below until the history is used under pass_mutex only. The budget
  // is declared before the readers so that it outlives the descriptors they give back.
  std::mutex pass_mutex;
  std::vector<int> roots;
  ReadBuffer buf{16384};
  FdBudget budget;
  ProcessTree tree;
  MachineReader machine;
  std::unique_ptr<GpuReader> gpu;  // made on the first pass with options.gpus: nvmlInit runs
                                   // on the sampling thread, not in the constructor
  struct Tracked {
    std::unique_ptr<ProcessReader> reader;
    uint64_t seen = 0;
  };
  std::unordered_map<int, Tracked> tracked;
  uint64_t passes = 0;
  double smaps_tokens_ns = 0;  // smaps_rollup CPU time that may still be spent
  double pass_cost_pct = -1;   // moving mean of the passes' own cost, % of one core (-1: none)
  int64_t smaps_refilled_ns = 0;

  mutable std::mutex history_mutex;
  std::vector<Snapshot> ring;
  size_t ring_next = 0;  // where the next snapshot goes once the ring is full

  std::atomic<uint64_t> samples{0};
  std::atomic<int64_t> cost_total{0};

  std::mutex callback_mutex;
  std::shared_ptr<const std::function<void(const Snapshot&)>> callback;
  std::shared_ptr<const std::function<bool(int)>> smaps_first;  // under callback_mutex

  mutable std::mutex run_mutex;
  std::condition_variable wake;
  bool stop_requested = false;
  std::thread thread;

  Snapshot pass();
  void read_smaps(Snapshot& snap, const std::vector<ProcessReader*>& readers);
  void record(const Snapshot& s);
  void run();
};

Snapshot Sampler::State::pass() {
  std::lock_guard lock(pass_mutex);
  const int64_t cpu_start = thread_cpu_ns();
  Snapshot snap;
  snap.t_ns = now_ns();
  snap.seq = ++passes;

  // The machine first: its fork counter tells the tree whether /proc must be listed again.
  // Both are slow sources: read on every smaps_every-th pass (see MachineReader, ProcessTree).
  const bool slow = (passes - 1) % uint64_t(options.smaps_every) == 0;
  snap.machine = machine.read(snap.t_ns, buf, slow);
  const std::vector<int> members = tree.members(roots, buf, machine.forks(), slow);
  PassContext ctx{buf, budget, passes, options.threads, options.smaps_every};
  snap.processes.reserve(members.size());
  std::vector<ProcessReader*> readers;
  readers.reserve(members.size());
  for (int pid : members) {
    Tracked& t = tracked[pid];
    ProcessSample sample;
    ReadStatus status = ReadStatus::gone;
    if (t.reader) status = t.reader->read(ctx, sample);
    if (status != ReadStatus::ok) {
      // New, exited, or the pid now names another process: start afresh (rates unknown).
      t.reader = std::make_unique<ProcessReader>(pid, budget);
      sample = ProcessSample{};
      status = t.reader->read(ctx, sample);
    }
    if (status != ReadStatus::ok) {
      tracked.erase(pid);  // exited mid-pass: left out of this pass, not an error
      tree.forget(pid);
      continue;
    }
    t.seen = passes;
    tree.set_parent(pid, sample.ppid);
    snap.processes.push_back(std::move(sample));
    readers.push_back(t.reader.get());
  }
  for (auto it = tracked.begin(); it != tracked.end();) {
    it = it->second.seen == passes ? std::next(it) : tracked.erase(it);
  }
  if (options.gpus) {
    if (!gpu) gpu = std::make_unique<GpuReader>(system::Nvml::shared());
    std::vector<int> pids;
    pids.reserve(snap.processes.size());
    for (const ProcessSample& p : snap.processes) pids.push_back(p.pid);
    snap.gpu = gpu->read(pids, slow);
  } else {
    snap.gpu.not_measured = "GPU sampling is off";
  }
  if (options.total_budget_pct > 0) {
    // The passes' own cost (without smaps_rollup), as a share of the interval: what the
    // total budget leaves to the smaps reads.
    const double pct = 100.0 * double(thread_cpu_ns() - cpu_start) / double(options.interval_ns);
    pass_cost_pct = pass_cost_pct < 0 ? pct : pass_cost_pct + (pct - pass_cost_pct) / 16;
  }
  read_smaps(snap, readers);
  snap.cost_ns = thread_cpu_ns() - cpu_start;
  return snap;
}

void Sampler::State::read_smaps(Snapshot& snap, const std::vector<ProcessReader*>& readers) {
  // A token bucket of CPU time, refilled at smaps_budget_pct of wall time and holding at most
  // one smaps_every cycle's worth: processes due are read, longest-waiting first, while it is
  // not empty. Cheap processes are all read on schedule; expensive ones spread out. A
  // preferred process's first read is taken even from an empty bucket (and owed like any
  // other): it is the baseline of its memory series, and a worker that starts while the
  // bucket is paying for earlier reads would otherwise show only the growth after its second.
  const bool capped = options.smaps_budget_pct > 0;
  const int64_t now = now_ns();
  if (capped) {
    double pct = options.smaps_budget_pct;
    if (options.total_budget_pct > 0 && pass_cost_pct >= 0)
      pct = std::max(pct, options.total_budget_pct - pass_cost_pct);
    const double rate = pct / 100.0;
    const double cap = rate * double(options.interval_ns) * options.smaps_every;
    smaps_tokens_ns = smaps_refilled_ns == 0
                          ? cap
                          : std::min(cap, smaps_tokens_ns + rate * double(now - smaps_refilled_ns));
    smaps_refilled_ns = now;
  }
  std::shared_ptr<const std::function<bool(int)>> first;
  {
    std::lock_guard lock(callback_mutex);
    first = smaps_first;
  }
  // (not preferred, pass of the last read, index): preferred processes first, then the
  // longest waiting.
  std::vector<std::tuple<bool, uint64_t, size_t>> due;
  const int64_t boot_now = options.smaps_min_age_ns > 0 ? boot_ns() : 0;
  for (size_t i = 0; i < readers.size(); ++i) {
    const uint64_t last = readers[i]->smaps_pass();
    if (last != 0 && passes - last < uint64_t(options.smaps_every) * readers[i]->smaps_backoff())
      continue;
    if (last == 0 && options.smaps_min_age_ns > 0) {
      const std::optional<int64_t> age = readers[i]->age_ns(boot_now);
      if (!age || *age < options.smaps_min_age_ns) continue;
    }
    const bool later = first && !(*first)(snap.processes[i].pid);
    if (later && options.smaps_preferred_only) continue;
    due.emplace_back(later, last, i);
  }
  std::sort(due.begin(), due.end());
  for (auto [later, last, i] : due) {
    const bool baseline = first && !later && last == 0;  // a preferred process's first read
    if (capped && smaps_tokens_ns <= 0 && !baseline) break;
    smaps_tokens_ns -= double(readers[i]->read_smaps(buf, passes, snap.processes[i]));
  }
}

void Sampler::State::record(const Snapshot& s) {
  samples.fetch_add(1, std::memory_order_relaxed);
  cost_total.fetch_add(s.cost_ns, std::memory_order_relaxed);
  std::lock_guard lock(history_mutex);
  if (ring.size() < options.capacity) {
    ring.push_back(s);
  } else {
    ring[ring_next] = s;
    ring_next = (ring_next + 1) % ring.size();
  }
}

void Sampler::State::run() {
  using Clock = std::chrono::steady_clock;
  const auto interval = std::chrono::nanoseconds(options.interval_ns);
  auto next = Clock::now();
  for (;;) {
    {
      std::lock_guard lock(run_mutex);
      if (stop_requested) return;
    }
    try {
      Snapshot snap = pass();
      record(snap);
      std::shared_ptr<const std::function<void(const Snapshot&)>> cb;
      {
        std::lock_guard lock(callback_mutex);
        cb = callback;
      }
      if (cb) (*cb)(snap);
    } catch (...) {
      // A failed pass (out of memory) or a throwing callback must not end the job it watches;
      // the next pass tries again.
    }
    next += interval;
    const auto now = Clock::now();
    if (next < now) next = now;  // behind schedule: skip the missed passes, never burst
    std::unique_lock lock(run_mutex);
    wake.wait_until(lock, next, [this] { return stop_requested; });
  }
}

Sampler::Sampler(int root_pid, SamplerOptions options)
    : state_(std::make_unique<State>(checked(options))) {
  require_process(root_pid);
  state_->roots.push_back(root_pid);
}

Sampler::~Sampler() { stop(); }

void Sampler::add_root(int pid) {
  require_process(pid);
  std::lock_guard lock(state_->pass_mutex);
  if (std::find(state_->roots.begin(), state_->roots.end(), pid) == state_->roots.end()) {
    state_->roots.push_back(pid);
  }
}

void Sampler::start() {
  std::lock_guard lock(state_->run_mutex);
  if (state_->thread.joinable()) return;
  state_->stop_requested = false;
  state_->thread = std::thread([s = state_.get()] { s->run(); });
}

void Sampler::stop() {
  std::thread thread;
  {
    std::lock_guard lock(state_->run_mutex);
    state_->stop_requested = true;
    // From the callback, on the sampling thread itself: it ends after the callback returns,
    // and a later stop() or the destructor joins it.
    if (state_->thread.get_id() == std::this_thread::get_id()) return;
    thread = std::move(state_->thread);
  }
  state_->wake.notify_all();
  if (thread.joinable()) thread.join();
}

bool Sampler::running() const {
  std::lock_guard lock(state_->run_mutex);
  return state_->thread.joinable();
}

Snapshot Sampler::sample_once() {
  Snapshot snap = state_->pass();
  state_->record(snap);
  return snap;
}

std::optional<Snapshot> Sampler::latest() const {
  std::lock_guard lock(state_->history_mutex);
  const auto& ring = state_->ring;
  if (ring.empty()) return std::nullopt;
  const size_t newest = ring.size() < state_->options.capacity
                            ? ring.size() - 1
                            : (state_->ring_next + ring.size() - 1) % ring.size();
  return ring[newest];
}

std::vector<Snapshot> Sampler::history(size_t max) const {
  std::lock_guard lock(state_->history_mutex);
  const auto& ring = state_->ring;
  const size_t n = (max == 0 || max > ring.size()) ? ring.size() : max;
  // Oldest kept snapshot: index 0 until the ring is full, then ring_next.
  const size_t oldest = ring.size() < state_->options.capacity ? 0 : state_->ring_next;
  std::vector<Snapshot> out;
  out.reserve(n);
  for (size_t i = ring.size() - n; i < ring.size(); ++i) {
    out.push_back(ring[(oldest + i) % ring.size()]);
  }
  return out;
}

void Sampler::set_callback(std::function<void(const Snapshot&)> callback) {
  auto cb = callback ? std::make_shared<const std::function<void(const Snapshot&)>>(
                           std::move(callback))
                     : nullptr;
  std::lock_guard lock(state_->callback_mutex);
  state_->callback = std::move(cb);
}

void Sampler::set_smaps_priority(std::function<bool(int)> first) {
  auto f = first ? std::make_shared<const std::function<bool(int)>>(std::move(first)) : nullptr;
  std::lock_guard lock(state_->callback_mutex);
  state_->smaps_first = std::move(f);
}

uint64_t Sampler::samples_taken() const {
  return state_->samples.load(std::memory_order_relaxed);
}

int64_t Sampler::cost_ns_total() const {
  return state_->cost_total.load(std::memory_order_relaxed);
}

const SamplerOptions& Sampler::options() const { return state_->options; }

}  // namespace dldoctor::sample
