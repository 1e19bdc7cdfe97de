// Wires the run together without Python on any per-event or per-sample path: the drain
// thread and the sampler thread both feed the (thread-safe) analyzer session directly.
#include "dldoctor_core/monitor/monitor.hpp"

#include <dirent.h>
#include <sched.h>

#include <fstream>
#include <set>

#include <algorithm>
#include <chrono>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/analyze/rules.hpp"
#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/sample/thread_pools.hpp"

namespace dldoctor::monitor {

namespace {
/// Events moved per drain call: bounds the time the drain holds its buffer, and a full ring
/// (64 Ki) empties in a few calls.
constexpr size_t kDrainBatch = 4096;
}  // namespace

Monitor::Monitor(const std::string& ring_path, uint32_t capacity, MonitorOptions opts)
    : opts_(opts),
      ring_(std::make_unique<trace::EventRing>(
          ring_path.empty() ? trace::EventRing::create_in_memory(capacity)
                            : trace::EventRing::create(ring_path, capacity))) {
  if (opts_.sample_interval_s <= 0) throw Error("sample interval must be positive");
  if (opts_.trace_max_events > 0) trace_ = std::make_unique<TraceStore>(opts_.trace_max_events);
}

Monitor::~Monitor() {
  try {
    stop();
  } catch (...) {
  }
}

void Monitor::start(int root_pid) {
  if (running_.exchange(true)) throw Error("the monitor is already running");
  sample::SamplerOptions so;
  so.interval_ns = static_cast<int64_t>(opts_.sample_interval_s * 1e9);
  // The whole sampler keeps to DESIGN.md's budget, and smaps_rollup gets what the passes
  // leave of it: on a small tree a worker's memory is read every second or two, enough to
  // see copy-on-write growth within a short run.
  so.total_budget_pct = kSamplerBudgetPct;
  so.gpus = true;  // "GPU not measured" when there is no driver: never an error
  // Only the workers' smaps_rollup is read: their memory is the one series a rule reads
  // (copy-on-write growth), and a walk is not free for the process walked. A torch main
  // process's takes ~4 ms of the kernel's time with its mmap lock held, and its batches'
  // shared-memory mappings wait on that lock: a tiny-batch loader with 2 workers kept 0.956
  // of its throughput with the watcher reading every process, 0.985 with the workers
  // only, 1.003 with none (bench/overhead.py --interleaved --pin --parts watcher).
  so.smaps_preferred_only = true;
  // A worker is walked first once it is 2 s old. Its series shows a growth only from its
  // third read, a smaps period (1 s) or more apart, so a worker that ends sooner (a loader
  // without persistent workers and short epochs, such as a validation pass) was walked for
  // nothing, ~4 ms of page tables each time with its mmap lock held while it maps its
  // batches. A tiny-batch loader with 2 workers and ~1 s epochs: the watcher's share of a
  // core 1.69% -> 0.84%, throughput kept 0.960 -> 0.968 (bench/overhead.py --interleaved
  // --pin, 150 rounds each, same hour).
  so.smaps_min_age_ns = kWorkerSmapsMinAgeNs;
  sampler_ = std::make_unique<sample::Sampler>(root_pid, so);
  sampler_->set_smaps_priority([this](int pid) { return session_.is_worker(pid); });
  series_.start(now_ns());
  sampler_->set_callback([this](const sample::Snapshot& s) {
    session_.ingest(s);
    probe_pools(s);
    series_.ingest(s);
    if (trace_) trace_->ingest(s);
  });
  sampler_->start();
  watchdog::WatchdogOptions wo;
  wo.run_dir = opts_.run_dir;
  wo.timeout_override_s = opts_.hang_timeout_s;
  // The watchdog captures; the analyzer's hang rules decide what the capture means.
  watchdog_ = std::make_unique<watchdog::Watchdog>(
      wo, [this] { return watch_state(); }, analyze::judge_hang);
  watchdog_->start();
  drain_thread_ = std::thread([this] { drain_loop(); });
}

void Monitor::stop() {
  {
    std::lock_guard lock(wake_mutex_);  // the drain thread sees it at once, not after its sleep
    if (!running_.exchange(false)) return;
  }
  wake_.notify_all();
  if (watchdog_) watchdog_->stop();
  if (drain_thread_.joinable()) drain_thread_.join();
  if (sampler_) sampler_->stop();
  catch_up();
}

void Monitor::set_facts(const system::Facts& facts) {
  std::lock_guard<std::mutex> lock(drain_mutex_);
  facts_ = facts;
  session_.set_facts(facts_);
}

void Monitor::note_main_pid(int pid) {
  if (pid <= 0 || std::find(main_pids_.begin(), main_pids_.end(), pid) != main_pids_.end()) {
    return;
  }
  main_pids_.push_back(pid);
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(pid, sizeof(set), &set) != 0) return;  // gone, or not ours: keep facts
  const int job_cpus = CPU_COUNT(&set);
  if (job_cpus <= 0) return;
  // Several main processes (ranks) may differ: the analysis uses the smallest, the one whose
  // workers are the most crowded.
  if (!facts_.cpu.affinity || job_cpus < *facts_.cpu.affinity) {
    facts_.cpu.affinity = job_cpus;
    double usable = job_cpus;
    if (facts_.cpu.cgroup_quota) usable = std::min(usable, *facts_.cpu.cgroup_quota);
    facts_.cpu.usable = usable;
    session_.set_facts(facts_);
  }
}

size_t Monitor::drain_once(std::vector<trace::Event>& buf) {
  std::lock_guard<std::mutex> lock(drain_mutex_);
  buf.clear();
  size_t n = ring_->drain(buf, kDrainBatch);
  for (const auto& e : buf) {
    session_.ingest(e);
    if (e.kind == trace::EventKind::kIterStart) note_main_pid(static_cast<int>(e.v[1]));
    if (e.kind == trace::EventKind::kMainBatch) {
      const int64_t handed = e.t_ns + std::max<int64_t>(e.v[0], 0);
      last_batch_ns_.store(handed, std::memory_order_relaxed);
      if (watchdog_) {
        watchdog_->note_batch(handed);
        if (e.v[1] >= 0) watchdog_->note_inter_batch_ns(e.v[0] + e.v[1]);
      }
    }
    track_locked(e);
  }
  if (n > 0) {
    series_.ingest(buf);
    if (trace_) trace_->ingest(buf);
  }
  events_seen_.fetch_add(n, std::memory_order_relaxed);
  return n;
}

void Monitor::track_locked(const trace::Event& e) {
  using trace::EventKind;
  std::lock_guard<std::mutex> lock(live_mutex_);
  LoaderLive& l = live_[e.loader];
  switch (e.kind) {
    case EventKind::kIterStart:
      l.active = true;
      l.iter_start_ns = e.t_ns;
      l.num_workers = e.worker;
      l.timeout_ms = e.v[0];
      l.main_pid = static_cast<int>(e.v[1]);
      l.start_method = e.v[2];
      l.epoch = e.v[3];
      l.last_main_index = -1;
      l.returned.clear();
      l.died.clear();
      if (!(e.flags & trace::kPersistentWorkers)) l.worker_pids.clear();
      break;
    case EventKind::kIterEnd:
      l.active = false;
      break;
    case EventKind::kWorkerStart:
      l.worker_pids[e.worker] = static_cast<int>(e.pid);
      l.returned.emplace(e.worker, 0);  // started, no batch yet: the hang rules' "before first"
      break;
    case EventKind::kWorkerBatch:
      if (e.worker >= 0) {
        l.worker_pids.emplace(e.worker, static_cast<int>(e.pid));
        l.returned[e.worker] += trace::batches_of(e);
      }
      break;
    case EventKind::kMainBatch:
      l.last_main_index = std::max<int64_t>(l.last_main_index, e.index);
      break;
    case EventKind::kWorkerDied:
      l.died[e.worker] = {static_cast<int>(e.v[0]),
                          e.v[1] > 0 ? std::optional<int>(static_cast<int>(e.v[1])) : std::nullopt};
      break;
    default:
      break;
  }
}

namespace {
/// Child pids of `pid` (all its threads' children), from /proc; empty when unreadable.
std::vector<int> children_of(int pid) {
  std::vector<int> out;
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    std::ifstream f(dir + "/" + e->d_name + "/children");
    int child = 0;
    while (f >> child) out.push_back(child);
  }
  closedir(d);
  return out;
}

std::string cmdline_of(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  for (char& c : s) {
    if (c == '\0') c = ' ';
  }
  return s;
}

/// Processes that may be the main process's DataLoader workers, before they announce
/// themselves: its children, minus multiprocessing's helpers (the resource tracker; the
/// forkserver itself, whose children are the workers under forkserver).
std::vector<int> candidate_workers(int main_pid) {
  std::vector<int> out;
  for (int child : children_of(main_pid)) {
    const std::string cmd = cmdline_of(child);
    if (cmd.find("resource_tracker") != std::string::npos) continue;
    if (cmd.find("forkserver import main") != std::string::npos) {
      for (int w : children_of(child)) out.push_back(w);
      continue;
    }
    out.push_back(child);
  }
  return out;
}
}  // namespace

watchdog::WatchState Monitor::watch_state() {
  static const char* kMethods[] = {"", "fork", "spawn", "forkserver"};
  watchdog::WatchState st;
  const int64_t last = last_batch_ns_.load(std::memory_order_relaxed);
  if (last > 0) st.last_batch_ns = last;
  std::lock_guard<std::mutex> lock(live_mutex_);
  std::vector<int> mains;
  for (const auto& [id, l] : live_) {
    if (!l.active) continue;
    st.loader_active = true;
    st.waiting = true;  // an active iterator owes batches; the stacks tell where main really is
    if (!st.active_since_ns || l.iter_start_ns > *st.active_since_ns) {
      st.active_since_ns = l.iter_start_ns;
    }
    if (l.main_pid > 0 && std::find(mains.begin(), mains.end(), l.main_pid) == mains.end()) {
      mains.push_back(l.main_pid);
      watchdog::WatchedProcess p;
      p.pid = l.main_pid;
      st.processes.push_back(p);
    }
    for (const auto& [worker, pid] : l.worker_pids) {
      watchdog::WatchedProcess p;
      p.pid = pid;
      p.loader = id;
      p.worker = worker;
      if (auto d = l.died.find(worker); d != l.died.end()) {
        p.exit_code = d->second.first;
        p.exit_signal = d->second.second;
      }
      st.processes.push_back(p);
    }
    if (static_cast<int>(l.worker_pids.size()) < l.num_workers && l.main_pid > 0) {
      // Workers that have not announced themselves are still starting (a spawned worker
      // imports torch and unpickles the dataset first): watch the main process's other
      // children under the missing ids, so their CPU progress shows they are not stuck.
      std::set<int> known;
      for (const auto& [w, pid] : l.worker_pids) known.insert(pid);
      int next_id = 0;
      for (int child : candidate_workers(l.main_pid)) {
        if (known.count(child)) continue;
        while (l.worker_pids.count(next_id)) ++next_id;
        if (next_id >= l.num_workers) break;
        watchdog::WatchedProcess p;
        p.pid = child;
        p.loader = id;
        p.worker = next_id++;
        st.processes.push_back(p);
      }
    }
    watchdog::LoaderContext c;
    c.loader = id;
    c.num_workers = l.num_workers;
    c.collate_fn = l.notes.collate_fn;
    c.worker_init_fn = l.notes.worker_init_fn;
    const int64_t m = l.start_method;
    c.start_method = (m >= 0 && m <= 3) ? kMethods[m] : "";
    if (c.start_method == "fork") {
      c.main_threads_at_fork = l.notes.main_threads;
      c.main_thread_names_at_fork = l.notes.main_thread_names;
    }
    // A fast loader's hand-out events are a sample; the progress table has each one.
    c.waiting_batch = std::max(l.last_main_index + 1, ring_->progress(id, l.epoch));
    if (l.num_workers > 0) {
      // In-order dispatch hands batch i to worker i mod num_workers while all are active.
      c.waiting_worker = static_cast<int>(*c.waiting_batch % l.num_workers);
    }
    c.batches_returned = l.returned;
    c.timeout_s = l.timeout_ms / 1000.0;
    c.main_pid = l.main_pid;
    c.rank = session_.rank_of(id);
    st.context.loaders.push_back(std::move(c));
  }
  return st;
}

void Monitor::probe_pools(const sample::Snapshot& s) {
  // Once per worker whose threads compete (two or more want a CPU): which pool libraries it
  // maps and the variables that size them. Sampler thread only.
  for (const sample::ProcessSample& p : s.processes) {
    if (!p.active_threads || *p.active_threads < 2 || probed_.count(p.pid)) continue;
    if (!session_.is_worker(p.pid)) continue;
    if (probed_.size() >= kMaxProbed) return;
    probed_.insert(p.pid);
    session_.note_thread_pools(p.pid, sample::read_thread_pools(p.pid));
  }
}

void Monitor::set_loader_notes(uint16_t loader, LoaderNotes notes) {
  std::lock_guard<std::mutex> lock(live_mutex_);
  live_[loader].notes = std::move(notes);
}

std::optional<watchdog::HangSnapshot> Monitor::last_hang() const {
  if (!watchdog_) return std::nullopt;
  return watchdog_->last_snapshot();
}

std::vector<report::Finding> Monitor::last_hang_findings() const {
  if (!watchdog_) return {};
  std::vector<report::Finding> out = watchdog_->last_findings();
  session_.label_ranks(out);
  return out;
}

analyze::Decision Monitor::decide(analyze::Window w) const {
  std::string not_healthy;
  std::vector<report::Finding> findings = session_.findings(0, w, not_healthy);
  const bool hung = w == analyze::Window::kWholeRun && watchdog_ && watchdog_->hangs() > 0;
  if (hung) findings = analyze::with_hang(std::move(findings), last_hang_findings());
  return analyze::decide(std::move(findings), session_.any_loader(), hung, not_healthy);
}

void Monitor::catch_up() {
  std::vector<trace::Event> buf;
  while (drain_once(buf) == kDrainBatch) {
  }
}

void Monitor::drain_loop() {
  std::vector<trace::Event> buf;
  buf.reserve(kDrainBatch);
  while (running_.load(std::memory_order_relaxed)) {
    size_t n = drain_once(buf);
    if (n < kDrainBatch) {
      std::unique_lock lock(wake_mutex_);
      wake_.wait_for(lock, std::chrono::milliseconds(opts_.drain_interval_ms),
                     [this] { return !running_.load(std::memory_order_relaxed); });
    }
  }
}

}  // namespace dldoctor::monitor
