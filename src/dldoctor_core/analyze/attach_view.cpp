// Each stack sample is read by the same reader as a hang capture (process_reading), so
// "in collate" or "idle" means the same thing whether faulthandler or py-spy printed the
// stack. Shares of samples stand in for the per-batch times the hooks would measure; the
// figures only the hooks can measure stay empty.
#include "dldoctor_core/analyze/attach_view.hpp"

#include <sched.h>
#include <sys/resource.h>

#include <algorithm>
#include <array>
#include <string_view>

#include "dldoctor_core/analyze/data_bound.hpp"
#include "dldoctor_core/analyze/process_reading.hpp"
#include "dldoctor_core/analyze/rules.hpp"
#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/sample/thread_pools.hpp"
#include "dldoctor_core/system/limits.hpp"
#include "dldoctor_core/watchdog/watchdog.hpp"

namespace dldoctor::analyze {

using watchdog::PyThreadStack;

namespace {

bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}
bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool is_fetch_frame(const PyFrame& f) {
  return f.function == "fetch" && ends_with(f.file, "torch/utils/data/_utils/fetch.py");
}
bool is_pin_loop(const PyFrame& f) {
  return f.function == "_pin_memory_loop" &&
         ends_with(f.file, "torch/utils/data/_utils/pin_memory.py");
}
bool is_fetch_place(SampledPlace p) {
  return p == SampledPlace::kGetitem || p == SampledPlace::kCollate || p == SampledPlace::kReading;
}

/// "site-packages/PIL/Image.py" -> "PIL/Image.py"; "/usr/lib/python3.11/socket.py" ->
/// "socket.py"; a user's "/home/u/train.py" -> "train.py".
std::string short_file(const std::string& file) {
  for (std::string_view mark : {"/site-packages/", "/dist-packages/"}) {
    size_t at = file.rfind(mark);
    if (at != std::string::npos) return file.substr(at + mark.size());
  }
  size_t lib = file.rfind("/lib/python");
  if (lib != std::string::npos) {
    size_t slash = file.find('/', lib + 11);
    if (slash != std::string::npos) return file.substr(slash + 1);
  }
  size_t slash = file.rfind('/');
  return slash == std::string::npos ? file : file.substr(slash + 1);
}

/// The collate_fn fetch() calls, when it is not torch's own: the first frame above fetch
/// outside torch's data utilities ("" for default_collate or when not found).
std::string custom_collate_of(const std::vector<PyFrame>& frames,
                              const std::vector<std::string>& names) {
  for (size_t i = 0; i < frames.size(); ++i) {
    if (!is_fetch_frame(frames[i])) continue;
    for (size_t j = i; j-- > 0;) {
      const PyFrame& f = frames[j];
      if (contains(f.file, "torch/utils/data/")) return "";  // default_collate
      if (f.function.empty() || f.function.front() == '<') continue;
      return j < names.size() && !names[j].empty() ? names[j] : f.function;
    }
    return "";
  }
  return "";
}

}  // namespace

const char* sampled_place_name(SampledPlace p) noexcept {
  static constexpr const char* kNames[] = {"getitem", "collate",   "reading",    "idle", "sending",
                                           "other",   "in_loader", "collective", "step"};
  return kNames[size_t(p)];
}

watchdog::PyFrame frame_from_pyspy(const std::string& qualified_name, const std::string& file,
                                   std::optional<int> line) {
  watchdog::PyFrame f;
  const size_t dot = qualified_name.rfind('.');
  f.function = dot == std::string::npos || dot + 1 == qualified_name.size()
                   ? qualified_name
                   : qualified_name.substr(dot + 1);
  f.file = file;
  if (line && *line > 0) f.line = line;
  return f;
}

bool reading_frame(const PyFrame& top) {
  // Reads with a Python frame of their own.
  static constexpr std::array<std::string_view, 7> kReaderFiles = {"/socket.py",
                                                                   "/ssl.py",
                                                                   "/http/client.py",
                                                                   "/selectors.py",
                                                                   "/multiprocessing/connection.py",
                                                                   "/urllib/request.py",
                                                                   "/_pyio.py"};
  for (std::string_view f : kReaderFiles)
    if (ends_with(top.file, f)) return true;
  // A C-level read has no frame: the caller's line shows the call.
  static constexpr std::array<std::string_view, 11> kReadCalls = {
      ".recv(",      ".recv_into(", ".recvfrom(", ".read(",   ".readinto(",  ".readline(",
      ".readlines(", "os.read(",    "os.pread(",  "urlopen(", "np.fromfile("};
  for (std::string_view c : kReadCalls)
    if (contains(top.code, c)) return true;
  return false;
}

SampledPlace place_of_sample(const std::vector<PyFrame>& frames, int worker,
                             const LoaderContext* loader) {
  ProcessCapture p;
  p.worker = worker;
  p.loader = worker >= 0 && loader ? loader->loader : -1;
  p.stacks.push_back(PyThreadStack{});
  p.stacks.back().frames = frames;
  const ProcessReading r = read_process(p, loader);
  switch (r.place) {
    case Place::kGetitem:
      return !frames.empty() && reading_frame(frames.front()) ? SampledPlace::kReading
                                                              : SampledPlace::kGetitem;
    case Place::kCollate:
      return SampledPlace::kCollate;
    case Place::kIdle:
      return SampledPlace::kIdle;
    case Place::kSending:
      return SampledPlace::kSending;
    case Place::kInLoader:
      return SampledPlace::kInLoader;
    default:
      break;
  }
  if (worker >= 0) return SampledPlace::kOther;
  for (const PyFrame& f : frames)
    if (contains(f.file, "torch/distributed/")) return SampledPlace::kCollective;
  return SampledPlace::kStep;
}

AttachSession::AttachSession(std::vector<AttachedLoader> loaders, system::Facts facts)
    : loaders_(std::move(loaders)), facts_(std::move(facts)) {
  // The job's own CPUs and descriptor limit, not the watcher's: a job may be pinned with
  // taskset or started under another ulimit. Several main processes: the most crowded one.
  std::set<int> mains;
  for (const AttachedLoader& l : loaders_) mains.insert(l.main_pid);
  for (int pid : mains) {
    cpu_set_t set;
    CPU_ZERO(&set);
    if (pid > 0 && sched_getaffinity(pid, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) {
      const int cpus = CPU_COUNT(&set);
      if (!facts_.cpu.affinity || cpus < *facts_.cpu.affinity) {
        facts_.cpu.affinity = cpus;
        double usable = cpus;
        if (facts_.cpu.cgroup_quota) usable = std::min(usable, *facts_.cpu.cgroup_quota);
        facts_.cpu.usable = usable;
      }
    }
    struct rlimit lim {};
    if (pid > 0 && prlimit(pid, RLIMIT_NOFILE, nullptr, &lim) == 0) {
      facts_.limits.nofile_soft = system::rlimit_value(lim.rlim_cur);
      facts_.limits.nofile_hard = system::rlimit_value(lim.rlim_max);
    }
  }
}

const AttachedLoader* AttachSession::loader_of(int pid, int* worker) const {
  for (const AttachedLoader& l : loaders_) {
    for (size_t i = 0; i < l.worker_pids.size(); ++i) {
      if (l.worker_pids[i] == pid && pid > 0) {
        *worker = int(i);
        return &l;
      }
    }
  }
  for (const AttachedLoader& l : loaders_) {
    if (l.main_pid == pid) {
      *worker = -1;
      return &l;
    }
  }
  return nullptr;
}

void AttachSession::ingest(const sample::Snapshot& s) {
  std::lock_guard<std::mutex> lock(mu_);
  procs_.ingest(s);
  for (const sample::ProcessSample& p : s.processes) {
    if (p.cpu_ns_total && !cpu_at_start_.count(p.pid))
      cpu_at_start_[p.pid] = watchdog::CpuMark{s.t_ns, p.cpu_ns_total};
    // A worker's memory over time, for copy-on-write growth (no samples read are known).
    int of_worker = -1;
    if (p.smaps_fresh && p.private_dirty_bytes && loader_of(p.pid, &of_worker) && of_worker >= 0) {
      std::vector<MemoryPoint>& pts = memory_[p.pid];
      if (pts.size() >= kMaxMemoryPoints) {  // thinned to every other read, the first kept
        std::vector<MemoryPoint> kept;
        for (size_t i = 0; i < pts.size(); i += 2) kept.push_back(pts[i]);
        pts = std::move(kept);
      }
      pts.push_back(MemoryPoint{s.t_ns, 0, *p.private_dirty_bytes, p.pss_bytes, p.rss_bytes});
    }
    // The thread pools of a worker whose threads compete, once (as the Monitor does).
    if (!p.active_threads || *p.active_threads < 2 || probed_.count(p.pid)) continue;
    int worker = -1;
    if (!loader_of(p.pid, &worker) || worker < 0) continue;
    probed_.insert(p.pid);
    WorkerPools& w = pools_[p.pid];
    w.pid = p.pid;
    w.pools = sample::read_thread_pools(p.pid);
  }
}

void AttachSession::count_hot_locked(int loader, const std::vector<PyFrame>& frames,
                                     const std::vector<std::string>& names, int64_t n) {
  size_t fetch_at = frames.size();
  for (size_t i = 0; i < frames.size(); ++i)
    if (is_fetch_frame(frames[i])) {
      fetch_at = i;
      break;
    }
  std::set<std::pair<std::string, std::string>> seen;  // recursion counts once per sample
  bool top = true;
  for (size_t i = 0; i < fetch_at; ++i) {  // the dataset's and collate's frames, top first
    const PyFrame& f = frames[i];
    if (contains(f.file, "torch/utils/data/")) continue;
    const std::string& fn = f.function;
    if (fn == "<listcomp>" || fn == "<genexpr>" || fn == "<dictcomp>" || fn == "<setcomp>")
      continue;
    const std::string name = i < names.size() && !names[i].empty() ? names[i] : fn;
    auto key = std::make_pair(name, f.file);
    HotCount& h = hot_[loader][key];
    h.name = name;
    h.file = f.file;
    if (seen.insert(key).second) h.cumulative += n;
    if (top) {
      h.self += n;
      if (f.line) h.lines[*f.line] += n;
      top = false;
    } else if (f.line) {
      h.lines[*f.line] += n;
    }
  }
}

void AttachSession::add_samples(int pid, std::vector<ThreadSamples> threads, int64_t failed,
                                double period_ms) {
  std::lock_guard<std::mutex> lock(mu_);
  int worker = -1;
  const AttachedLoader* a = loader_of(pid, &worker);
  if (!a) return;
  if (period_ms > 0) period_ms_ = period_ms;
  LoaderContext ctx;
  ctx.loader = a->loader;
  ctx.num_workers = a->num_workers;
  ctx.collate_fn = a->collate_fn;
  ctx.worker_init_fn = a->worker_init_fn;

  ProcessTally& t = tallies_[pid];
  t.pid = pid;
  t.failed += failed;
  struct Read {
    std::vector<SampledPlace> places;  // per stack
    int64_t score = 0;
  };
  std::vector<Read> reads(threads.size());
  for (size_t ti = 0; ti < threads.size(); ++ti) {
    ThreadSamples& th = threads[ti];
    // The source lines settle what a name cannot (is fetch() at `self.collate_fn(data)`?).
    std::vector<PyThreadStack> text(th.stacks.size());
    for (size_t i = 0; i < th.stacks.size(); ++i) text[i].frames = std::move(th.stacks[i].frames);
    watchdog::annotate_source(text);
    for (size_t i = 0; i < th.stacks.size(); ++i) th.stacks[i].frames = std::move(text[i].frames);
    for (const SampledStack& st : th.stacks) {
      const SampledPlace p = place_of_sample(st.frames, worker, &ctx);
      reads[ti].places.push_back(p);
      // The thread that matters: a worker's loop, or the main process's loop over the loader.
      const bool matters = worker >= 0 ? p != SampledPlace::kOther
                                       : p == SampledPlace::kInLoader || is_fetch_place(p);
      if (matters) reads[ti].score += st.count;
      for (const PyFrame& f : st.frames)
        if (is_pin_loop(f)) t.pin_thread = true;
    }
  }
  size_t pick = threads.size();
  for (size_t ti = 0; ti < threads.size(); ++ti)
    if (reads[ti].score > 0 && (pick == threads.size() || reads[ti].score > reads[pick].score))
      pick = ti;
  if (pick == threads.size())
    for (size_t ti = 0; ti < threads.size(); ++ti)
      if (threads[ti].name == "MainThread") pick = ti;
  if (pick == threads.size() && !threads.empty()) pick = 0;
  if (pick == threads.size()) return;

  const ThreadSamples& th = threads[pick];
  t.thread = th.name;
  t.distinct += th.stacks.size();
  for (size_t i = 0; i < th.stacks.size(); ++i) {
    const SampledStack& st = th.stacks[i];
    const SampledPlace p = reads[pick].places[i];
    t.samples += st.count;
    t.places[p] += st.count;
    if (is_fetch_place(p)) count_hot_locked(a->loader, st.frames, st.names, st.count);
    if (p == SampledPlace::kCollate && !collate_seen_.count(a->loader)) {
      if (std::string c = custom_collate_of(st.frames, st.names); !c.empty())
        collate_seen_[a->loader] = c;
    }
  }
}

void AttachSession::keep_loaders(const std::set<int>& ids) {
  std::lock_guard<std::mutex> lock(mu_);
  std::erase_if(loaders_, [&](const AttachedLoader& l) { return !ids.count(l.loader); });
}

std::vector<AttachedLoader> AttachSession::loaders() const {
  std::lock_guard<std::mutex> lock(mu_);
  return loaders_;
}

std::vector<int> AttachSession::memory_workers(size_t max) const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  for (size_t i = 0; out.size() < max; ++i) {
    bool more = false;
    for (const AttachedLoader& l : loaders_) {
      if (i >= l.worker_pids.size()) continue;
      more = true;
      if (l.worker_pids[i] > 0 && out.size() < max) out.push_back(l.worker_pids[i]);
    }
    if (!more) break;
  }
  return out;
}

void AttachSession::set_window(int64_t from_ns, int64_t to_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  from_ns_ = from_ns;
  to_ns_ = to_ns;
}

LoaderView AttachSession::loader_view_locked(const AttachedLoader& a) const {
  LoaderView l;
  l.loader = uint16_t(a.loader);
  l.config.num_workers = a.num_workers;
  l.config.main_pid = a.main_pid;
  l.config.start_method = a.start_method;
  auto main_tally = tallies_.find(a.main_pid);
  if (a.pin_memory || (main_tally != tallies_.end() && main_tally->second.pin_thread))
    l.config.flags |= trace::kPinMemory;
  if (a.persistent_workers) l.config.flags |= trace::kPersistentWorkers;
  if (!collate_fn_locked(a).empty()) l.config.flags |= trace::kCustomCollate;
  for (int pid : a.worker_pids)
    if (pid > 0) l.worker_pids.push_back(pid);
  const std::vector<int> fetchers =
      a.num_workers > 0 ? l.worker_pids : std::vector<int>{a.main_pid};
  l.fetchers = procs_.aggregate(fetchers, -1, to_ns_);

  StackShares st;
  st.window_s = double(to_ns_ - from_ns_) / 1e9;
  int64_t in_loader = 0;
  if (auto it = tallies_.find(a.main_pid); it != tallies_.end()) {
    const ProcessTally& m = it->second;
    st.main_samples = m.samples;
    in_loader = m.share_of(SampledPlace::kInLoader) + m.share_of(SampledPlace::kGetitem) +
                m.share_of(SampledPlace::kCollate) + m.share_of(SampledPlace::kReading);
    if (m.samples > 0) {
      st.main_in_loader = double(in_loader) / double(m.samples);
      st.main_collective = double(m.share_of(SampledPlace::kCollective)) / double(m.samples);
    }
    st.failed_samples += m.failed;
  }
  std::map<SampledPlace, int64_t> fetch;
  for (int pid : fetchers) {
    auto it = tallies_.find(pid);
    if (it == tallies_.end()) continue;
    for (const auto& [p, n] : it->second.places) fetch[p] += n;
    st.fetch_samples += it->second.samples;
    if (pid != a.main_pid) st.failed_samples += it->second.failed;
  }
  if (a.num_workers == 0) {
    // The main process is the fetcher: its samples outside the fetch are the step.
    st.fetch_samples = 0;
    for (SampledPlace p : {SampledPlace::kGetitem, SampledPlace::kCollate, SampledPlace::kReading})
      st.fetch_samples += fetch[p];
    fetch[SampledPlace::kStep] = 0;
  }
  auto share = [&](SampledPlace p) {
    return st.fetch_samples > 0 ? double(fetch[p]) / double(st.fetch_samples) : 0.0;
  };
  st.getitem = share(SampledPlace::kGetitem);
  st.collate = share(SampledPlace::kCollate);
  st.reading = share(SampledPlace::kReading);
  st.idle = share(SampledPlace::kIdle);
  st.sending = share(SampledPlace::kSending);
  st.other = share(SampledPlace::kOther);
  if (st.main_samples == 0 && st.fetch_samples == 0) return l;  // no stack could be read

  // A stuck loader hands out nothing: no stall to judge, the hang rules speak of it.
  if (st.main_samples > 0 && !stuck_.count(a.loader)) {
    l.data_stall_fraction = double(in_loader) / double(st.main_samples);
    l.loop_s = st.window_s;
  }
  const double in_fetch = st.getitem + st.collate + st.reading;
  if (in_fetch > 0) l.collate_share = st.collate / in_fetch;
  // CPU time over the time in the fetch: the share of each fetch spent on a CPU. The
  // sampler's CPU is per process, averaged over the window; the stacks say how much of the
  // window the fetch took.
  if (l.fetchers.cpu_pct && in_fetch >= 0.05)
    l.on_cpu_fraction = std::min(1.0, *l.fetchers.cpu_pct / 100.0 / in_fetch);
  if (auto it = hot_.find(a.loader); it != hot_.end()) {
    for (const auto& [key, h] : it->second) {
      HotFunction f;
      f.name = h.name;
      int best_line = 0;
      int64_t best = -1;
      for (const auto& [line, n] : h.lines)
        if (n > best) best = n, best_line = line;
      f.location = short_file(h.file) + (best_line > 0 ? ":" + std::to_string(best_line) : "");
      f.cumulative_ms = double(h.cumulative) * period_ms_;
      f.self_ms = double(h.self) * period_ms_;
      l.hot_functions.push_back(std::move(f));
    }
    std::stable_sort(l.hot_functions.begin(), l.hot_functions.end(),
                     [](const HotFunction& x, const HotFunction& y) {
                       return x.cumulative_ms > y.cumulative_ms;
                     });
    if (l.hot_functions.size() > 64) l.hot_functions.resize(64);
  }
  for (size_t i = 0; i < a.worker_pids.size(); ++i) {
    const int pid = a.worker_pids[i];
    if (pid <= 0) continue;
    if (auto it = pools_.find(pid); it != pools_.end()) l.worker_pools.push_back(it->second);
    if (auto it = memory_.find(pid); it != memory_.end())
      l.worker_memory.push_back(WorkerMemory{pid, int(i), it->second, true});
  }
  l.stacks = st;
  return l;
}

JobView AttachSession::view() const {
  std::lock_guard<std::mutex> lock(mu_);
  JobView v;
  v.whole_run = true;
  v.from_ns = from_ns_;
  v.to_ns = to_ns_;
  v.facts = facts_;
  std::vector<int> workers, mains;
  for (const AttachedLoader& a : loaders_) {
    v.loaders.push_back(loader_view_locked(a));
    for (int pid : v.loaders.back().worker_pids) workers.push_back(pid);
    if (std::find(mains.begin(), mains.end(), a.main_pid) == mains.end())
      mains.push_back(a.main_pid);
  }
  v.total_workers = int(workers.size());
  v.all_workers = procs_.aggregate(workers, -1, to_ns_);
  v.main_process = procs_.aggregate(mains, -1, to_ns_);
  v.machine = procs_.machine(-1, to_ns_);
  return v;
}

std::vector<ProcessTally> AttachSession::tallies() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ProcessTally> out;
  for (const auto& [pid, t] : tallies_) out.push_back(t);
  return out;
}

std::vector<int> AttachSession::stuck_loaders() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<int> out;
  for (const AttachedLoader& a : loaders_) {
    auto m = tallies_.find(a.main_pid);
    if (m == tallies_.end() || m->second.samples < kMinStackSamples) continue;
    const ProcessTally& t = m->second;
    const int64_t in = t.share_of(SampledPlace::kInLoader) + t.share_of(SampledPlace::kGetitem) +
                       t.share_of(SampledPlace::kCollate) + t.share_of(SampledPlace::kReading);
    if (double(in) < kStuckInLoaderShare * double(t.samples)) continue;
    // No process of the loader makes progress: the main process and every fetcher idle.
    std::vector<int> pids{a.main_pid};
    for (int pid : a.worker_pids)
      if (pid > 0) pids.push_back(pid);
    // Reading is progress too: a worker waiting on a slow store (io_bound) is off-CPU, but
    // its bytes keep coming to the end of the window; a stuck one reads nothing.
    const int64_t late = to_ns_ > from_ns_ ? to_ns_ - (to_ns_ - from_ns_) / 2 : -1;
    bool progress = false, measured = false;
    for (int pid : pids) {
      const ProcAgg g = procs_.aggregate({pid}, -1, to_ns_);
      if (!g.cpu_pct) continue;
      measured = true;
      if (*g.cpu_pct >= watchdog::kBusyCpuShare * 100) progress = true;
      const ProcAgg recent = procs_.aggregate({pid}, late, to_ns_);
      if (recent.rchar_per_s && *recent.rchar_per_s >= kProgressReadBytesPerS) progress = true;
    }
    if (measured && !progress) out.push_back(a.loader);
  }
  return out;
}

std::vector<watchdog::WatchedProcess> AttachSession::processes() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<watchdog::WatchedProcess> out;
  std::set<int> mains;
  for (const AttachedLoader& a : loaders_) {
    if (mains.insert(a.main_pid).second) out.push_back({a.main_pid, -1, -1, {}, {}});
    for (size_t i = 0; i < a.worker_pids.size(); ++i)
      if (a.worker_pids[i] > 0) out.push_back({a.worker_pids[i], a.loader, int(i), {}, {}});
  }
  return out;
}

watchdog::HangContext AttachSession::hang_context() const {
  static const char* kMethods[] = {"", "fork", "spawn", "forkserver"};
  std::lock_guard<std::mutex> lock(mu_);
  watchdog::HangContext c;
  for (const AttachedLoader& a : loaders_) {
    LoaderContext l;
    l.loader = a.loader;
    l.num_workers = a.num_workers;
    l.collate_fn = collate_fn_locked(a);
    l.worker_init_fn = a.worker_init_fn;
    const size_t m = size_t(a.start_method);
    l.start_method = m < 4 ? kMethods[m] : "";
    if (auto it = threads_at_fork_.find(a.main_pid);
        it != threads_at_fork_.end() && a.start_method == trace::StartMethod::kFork) {
      l.main_threads_at_fork = 1 + int(it->second.size());  // the main thread, and these
      l.main_thread_names_at_fork = it->second;
    }
    c.loaders.push_back(std::move(l));
  }
  return c;
}

std::string AttachSession::collate_fn(const AttachedLoader& a) const {
  std::lock_guard<std::mutex> lock(mu_);
  return collate_fn_locked(a);
}

std::string AttachSession::collate_fn_locked(const AttachedLoader& a) const {
  if (!a.collate_fn.empty()) return a.collate_fn;
  auto it = collate_seen_.find(a.loader);
  return it == collate_seen_.end() ? std::string() : it->second;
}

void AttachSession::note_threads_at_fork(int main_pid, std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(mu_);
  threads_at_fork_[main_pid] = std::move(names);
}

watchdog::HangSnapshot AttachSession::capture_hang(std::map<int, std::vector<PyThreadStack>> stacks,
                                                   const std::map<int, std::string>& notes) {
  const std::vector<int> stuck = stuck_loaders();
  std::map<int, watchdog::CpuMark> marks;
  int64_t from = 0;
  {
    std::lock_guard<std::mutex> lock(mu_);
    marks = cpu_at_start_;
    from = from_ns_;
    stuck_.insert(stuck.begin(), stuck.end());
  }
  const int64_t now = now_ns();
  const double watched_s = from > 0 ? double(now - from) / 1e9 : 0;
  // The kernel view and the CPU since the window began; no signal, no run dir: the stacks
  // come from py-spy, which reads the processes' memory without stopping them.
  watchdog::HangSnapshot snap =
      watchdog::capture_hang(processes(), marks, now, watched_s, watched_s, "", 0, 0);
  for (ProcessCapture& c : snap.processes) {
    if (auto it = stacks.find(c.pid); it != stacks.end()) {
      c.stacks = std::move(it->second);
      watchdog::annotate_source(c.stacks);
    }
    if (auto it = notes.find(c.pid); it != notes.end() && c.stack_note.empty())
      c.stack_note = it->second;
  }
  return snap;
}

Decision AttachSession::decide(const std::vector<report::Finding>& hang, bool hung) const {
  const JobView v = view();
  std::vector<report::Finding> findings = run_rules(v);
  if (hung) findings = with_hang(std::move(findings), hang);
  // "healthy" says the loader keeps up: only a loader whose stacks were read can be judged
  // so. Without them (no permission) a critical finding from /proc still names the verdict,
  // and nothing else does: "unknown".
  bool judged = false;
  for (const LoaderView& l : v.loaders) judged = judged || l.stacks.has_value();
  for (const report::Finding& f : findings)
    judged = judged || f.severity == report::Severity::kCritical;
  return analyze::decide(std::move(findings), judged, hung);
}

system::Facts AttachSession::facts() const {
  std::lock_guard<std::mutex> lock(mu_);
  return facts_;
}

}  // namespace dldoctor::analyze
