// The Session folds events and passes into bounded state, and reduces that state to a
// JobView over a window when asked; the rules do the rest.
#include "dldoctor_core/analyze/session.hpp"

#include <algorithm>
#include <cctype>

#include "dldoctor_core/analyze/data_bound.hpp"
#include "dldoctor_core/analyze/rules.hpp"
#include "dldoctor_core/analyze/text.hpp"
#include "dldoctor_core/analyze/verdict.hpp"

namespace dldoctor::analyze {

void Session::set_facts(const system::Facts& facts) {
  std::lock_guard<std::mutex> lock(mu_);
  facts_ = facts;
}

void Session::set_data_storage(const system::StorageFacts& storage) {
  std::lock_guard<std::mutex> lock(mu_);
  storage_ = storage;
}

void Session::touch_worker_locked(uint16_t loader, int worker, int pid, int64_t t_ns, bool exited) {
  if (pid <= 0 || worker < 0) return;
  auto it = worker_pids_.find(pid);
  if (it == worker_pids_.end()) {
    if (worker_pids_.size() >= kMaxWorkerPids) return;
    it = worker_pids_.emplace(pid, WorkerPid{loader, worker, t_ns, t_ns, false}).first;
  }
  WorkerPid& w = it->second;
  w.loader = loader;
  w.worker = worker;
  w.first_ns = std::min(w.first_ns, t_ns);
  w.last_ns = std::max(w.last_ns, t_ns);
  if (exited) w.exited = true;
}

void Session::ingest(const trace::Event& e) noexcept {
  std::lock_guard<std::mutex> lock(mu_);
  ++events_;
  if (e.t_ns > 0) {
    if (!first_ns_ || e.t_ns < first_ns_) first_ns_ = e.t_ns;
    latest_ns_ = std::max(latest_ns_, e.t_ns);
  }
  LoaderTrack& l = loaders_[e.loader];
  switch (e.kind) {
    case trace::EventKind::kIterStart:
      l.on_iter_start(e);
      break;
    case trace::EventKind::kWorkerBatch:
      l.on_worker_batch(e);
      latest_ns_ = std::max(latest_ns_, e.t_ns + std::max<int64_t>(0, e.v[0]));
      touch_worker_locked(e.loader, e.worker, int(e.pid), e.t_ns + std::max<int64_t>(0, e.v[0]),
                          false);
      if (auto it = worker_pids_.find(int(e.pid)); it != worker_pids_.end() && e.worker >= 0)
        it->second.samples += trace::batches_of(e) * e.count;
      break;
    case trace::EventKind::kMainBatch:
      l.on_main_batch(e);
      latest_ns_ = std::max(latest_ns_, e.t_ns + std::max<int64_t>(0, e.v[0]));
      break;
    case trace::EventKind::kWorkerStart:
      touch_worker_locked(e.loader, e.worker, int(e.pid), e.t_ns, false);
      break;
    case trace::EventKind::kWorkerExit:
      touch_worker_locked(e.loader, e.worker, int(e.pid), e.t_ns, true);
      l.on_unmeasured_fetches(e.worker, e.v[2]);
      break;
    case trace::EventKind::kWorkerDrained:
      l.on_worker_drained(e);
      break;
    case trace::EventKind::kWorkerException:
      l.on_worker_exception();
      break;
    case trace::EventKind::kIterEnd:
      l.on_iter_end(e);
      break;
    case trace::EventKind::kWorkerDied: {
      l.on_worker_died();
      failures_.on_death_event(e);
      // Written by the main process, with the dead worker's pid in v[2] when it knew it;
      // else the dead worker is the newest pid of that id.
      WorkerPid* newest = nullptr;
      if (auto it = worker_pids_.find(int(e.v[2])); e.v[2] > 0 && it != worker_pids_.end()) {
        newest = &it->second;
      } else {
        for (auto& [pid, w] : worker_pids_)
          if (w.loader == e.loader && w.worker == e.worker && !w.exited &&
              (!newest || w.first_ns > newest->first_ns))
            newest = &w;
      }
      if (newest) {
        newest->exited = true;
        newest->last_ns = std::max(newest->last_ns, e.t_ns);
      }
      break;
    }
    default:
      break;
  }
}

void Session::ingest(const sample::Snapshot& s) {
  std::lock_guard<std::mutex> lock(mu_);
  procs_.ingest(s);
  gpu_.ingest(s.t_ns, s.gpu, first_ns_ > 0 && s.t_ns >= first_ns_);
  latest_ns_ = std::max(latest_ns_, s.t_ns);
  for (const sample::ProcessSample& p : s.processes) {
    if (!p.smaps_fresh || !p.private_dirty_bytes) continue;
    auto it = memory_.find(p.pid);
    if (it == memory_.end()) {
      if (memory_.size() >= kMaxMemoryPids) continue;
      it = memory_.emplace(p.pid, std::vector<MemoryPoint>{}).first;
    }
    // Every pid is kept: a worker's first read may come before its start event is drained,
    // and it had fetched nothing then.
    auto w = worker_pids_.find(p.pid);
    std::vector<MemoryPoint>& pts = it->second;
    if (pts.size() >= kMaxMemoryPoints) {
      // Thin to every other point, the first kept: the series still spans the whole run.
      std::vector<MemoryPoint> kept;
      for (size_t i = 0; i < pts.size(); i += 2) kept.push_back(pts[i]);
      pts = std::move(kept);
    }
    pts.push_back(MemoryPoint{s.t_ns, w != worker_pids_.end() ? w->second.samples : 0,
                              *p.private_dirty_bytes, p.pss_bytes, p.rss_bytes});
  }
}

void Session::note_dataset(uint16_t loader, DatasetNotes notes) {
  std::lock_guard<std::mutex> lock(mu_);
  datasets_[loader] = std::move(notes);
}

void Session::note_slow_batch(uint16_t loader, SlowBatchNote note) {
  std::lock_guard<std::mutex> lock(mu_);
  if (note.samples.size() > 64) note.samples.resize(64);
  std::vector<SlowBatchNote>& notes = slow_notes_[loader];
  if (notes.size() >= kMaxSlowNotes) notes.erase(notes.begin());
  notes.push_back(std::move(note));
}

void Session::note_thread_pools(int pid, sample::ThreadPools pools) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pools_.size() >= kMaxMemoryPids && !pools_.count(pid)) return;
  WorkerPools& w = pools_[pid];
  w.pid = pid;
  w.pools = std::move(pools);
}

void Session::note_torch_threads(int pid, int threads) {
  std::lock_guard<std::mutex> lock(mu_);
  if (pools_.size() >= kMaxMemoryPids && !pools_.count(pid)) return;
  WorkerPools& w = pools_[pid];
  w.pid = pid;
  w.torch_threads = threads;
}

bool Session::is_worker(int pid) const {
  std::lock_guard<std::mutex> lock(mu_);
  return worker_pids_.count(pid) > 0;
}

void Session::note_worker_pid(uint16_t loader, int worker, int pid, int64_t t_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  touch_worker_locked(loader, worker, pid, t_ns, false);
}

void Session::add_hot_functions(uint16_t loader, std::vector<HotFunction> functions) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<HotFunction>& hot = hot_[loader];
  for (HotFunction& h : functions) {
    auto it = std::find_if(hot.begin(), hot.end(), [&](const HotFunction& o) {
      return o.name == h.name && o.location == h.location;
    });
    if (it != hot.end()) {
      it->cumulative_ms += h.cumulative_ms;
      it->calls += h.calls;
      if (h.self_ms) it->self_ms = it->self_ms.value_or(0) + *h.self_ms;
    } else if (hot.size() < 256) {  // a profile names a few dozen functions; bound it anyway
      hot.push_back(std::move(h));
    }
  }
  std::stable_sort(hot.begin(), hot.end(), [](const HotFunction& a, const HotFunction& b) {
    return a.cumulative_ms > b.cumulative_ms;
  });
}

std::vector<int> Session::worker_pids_locked(std::optional<uint16_t> loader, int64_t from,
                                             int64_t to) const {
  std::vector<int> out;
  for (const auto& [pid, w] : worker_pids_) {
    if (loader && w.loader != *loader) continue;
    int64_t first = w.first_ns, last = w.last_ns;
    if (auto seen = procs_.seen(pid)) {
      first = std::min(first, seen->first);
      last = std::max(last, seen->second);
    } else if (!w.exited && !procs_.any()) {
      last = to;  // no sampler: a worker that has not exited is taken as alive
    }
    if (last >= from && first <= to) out.push_back(pid);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::optional<int> Session::peak_workers_locked(int64_t from, int64_t to) const {
  if (worker_pids_.empty()) return std::nullopt;
  std::vector<std::pair<int64_t, int>> edges;  // (time, +1 start / -1 end)
  for (const auto& [pid, w] : worker_pids_) {
    int64_t first = w.first_ns, last = w.last_ns;
    if (auto seen = procs_.seen(pid)) {
      first = std::min(first, seen->first);
      last = std::max(last, seen->second);
    } else if (!w.exited && !procs_.any()) {
      last = to;
    }
    if (last < from || first > to) continue;
    edges.emplace_back(std::max(first, from), +1);
    edges.emplace_back(std::min(last, to), -1);
  }
  // Starts before ends at the same instant: a pid seen in one pass only still counts.
  std::sort(edges.begin(), edges.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  });
  int now = 0, peak = 0;
  for (const auto& [t, d] : edges) peak = std::max(peak, now += d);
  return peak;
}

namespace {

struct Percentiles {
  std::optional<double> getitem_p50_ms, getitem_p99_ms, collate_p50_ms, fetch_p50_ms;
  std::optional<double> fetch_p99_ms, fetch_max_ms;
};

Percentiles percentiles(const std::vector<WorkerBatchRecord>& records) {
  std::vector<double> getitem, collate, fetch;
  getitem.reserve(records.size());
  collate.reserve(records.size());
  fetch.reserve(records.size());
  for (const WorkerBatchRecord& r : records) {
    fetch.push_back(double(r.fetch_ns) / 1e6);
    collate.push_back(double(r.collate_ns) / 1e6);
    if (r.samples > 0) getitem.push_back(double(r.fetch_ns - r.collate_ns) / 1e6 / r.samples);
  }
  Percentiles p;
  p.getitem_p50_ms = quantile(getitem, 0.5);
  p.getitem_p99_ms = quantile(getitem, 0.99);
  p.collate_p50_ms = quantile(collate, 0.5);
  p.fetch_p50_ms = quantile(fetch, 0.5);
  p.fetch_p99_ms = quantile(fetch, 0.99);
  p.fetch_max_ms = quantile(fetch, 1.0);
  return p;
}

/// p50, p90 and max of one worker's batch times (ms).
WorkerFetch worker_fetch(int id, const WorkerTrack& wt, int64_t from) {
  WorkerFetch f;
  f.worker = id;
  f.pid = wt.pid;
  std::vector<double> ms;
  if (from < 0) {
    for (int64_t ns : wt.fetch_sample.items()) ms.push_back(double(ns) / 1e6);
    f.batches = wt.timed;
  } else {
    for (size_t i = 0; i < wt.recent_fetch_ns.size() && i < wt.recent_end_ns.size(); ++i)
      if (wt.recent_end_ns.newest(i) >= from)
        ms.push_back(double(wt.recent_fetch_ns.newest(i)) / 1e6);
    f.batches = int64_t(ms.size());
  }
  f.p50_ms = quantile(ms, 0.5);
  f.p90_ms = quantile(ms, 0.9);
  f.max_ms = quantile(ms, 1.0);
  if (from < 0 && wt.max_fetch_ns > 0) f.max_ms = double(wt.max_fetch_ns) / 1e6;
  return f;
}

/// Workers' time with their IterableDataset share run out, over the epochs of [from, to]:
/// from a worker's kWorkerDrained to its epoch's last hand-out (the loop went on with the
/// others until then). Empty when no worker of the window ran out before that.
std::optional<WorkerSplit> worker_split(const std::vector<EpochRecord>& epochs, int64_t from,
                                        int64_t to) {
  WorkerSplit w;
  double worst_idle = 0;
  for (const EpochRecord& ep : epochs) {
    if (ep.num_workers < 2 || ep.last_batch_ns <= 0) continue;
    const int64_t start = std::max(ep.start_ns, from), end = std::min(ep.last_batch_ns, to);
    if (end <= start) continue;
    w.num_workers = std::max(w.num_workers, ep.num_workers);
    w.worker_s += double(ep.num_workers) * double(end - start) / 1e9;
    std::vector<WorkerSplit::Out> outs;
    double idle = 0;
    for (const DrainedWorker& d : ep.drained) {
      const int64_t since = std::max(d.t_ns, start);
      if (since >= end) continue;
      outs.push_back({d, double(d.t_ns - ep.start_ns) / 1e9, double(end - since) / 1e9});
      idle += outs.back().idle_s;
    }
    w.idle_s += idle;
    if (idle > worst_idle) {
      worst_idle = idle;
      w.epoch_s = double(end - start) / 1e9;
      w.ran_out = std::move(outs);
    }
  }
  if (w.ran_out.empty()) return std::nullopt;
  return w;
}

}  // namespace

JobView Session::view_locked(int64_t now_ns, Window w) const {
  JobView v;
  v.whole_run = w == Window::kWholeRun;
  v.to_ns = now_ns > 0 ? now_ns : latest_ns_;
  v.from_ns = v.whole_run ? first_ns_ : v.to_ns - kRecentWindowNs;
  const int64_t from = v.whole_run ? -1 : v.from_ns;  // -1: whole-run sums in the tracks
  v.facts = facts_;
  v.data_storage = storage_;

  std::vector<int> main_pids;
  bool any_worker_batches = false;
  int configured_workers = 0;
  for (const auto& [id, track] : loaders_) {
    LoaderView l;
    l.loader = id;
    l.config = track.config();
    if (auto r = ranks_.find(id); r != ranks_.end()) l.rank = r->second;
    l.rank_loader = rank_loader_locked(id);
    const MainSums m = v.whole_run ? track.main_total() : track.main_between(v.from_ns, v.to_ns);
    const WorkerSums ws =
        v.whole_run ? track.worker_total() : track.worker_between(v.from_ns, v.to_ns);
    if (m.batches == 0 && ws.batches == 0) continue;  // idle in this window
    l.batches = m.batches;
    l.stepped_batches = m.stepped;
    const int64_t loop_ns = m.wait_ns + m.step_ns;
    l.loop_s = double(loop_ns) / 1e9;
    if (m.stepped > 0 && loop_ns > 0) {
      l.data_stall_fraction = double(m.wait_ns) / double(loop_ns);
      l.wait_mean_s = double(m.wait_ns) / 1e9 / double(m.stepped);
      l.step_mean_s = double(m.step_ns) / 1e9 / double(m.stepped);
      l.batches_per_s = double(m.stepped) / (double(loop_ns) / 1e9);
      std::vector<double> waits(track.wait_sample().items().begin(),
                                track.wait_sample().items().end());
      if (const auto q = quantile(waits, kHandoverQuantile)) l.handover_s = *q / 1e9;
      l.handover_measured = m.made_known;
      l.handover_measured_s = double(m.made_wait_ns) / 1e9;
      std::vector<double> handovers(track.handover_sample().items().begin(),
                                    track.handover_sample().items().end());
      if (const auto q = quantile(handovers, 0.5)) l.handover_measured_p50_s = *q / 1e9;
      l.demand_step_s = m.waited >= kMinSteadyBatches
                            ? double(m.waited_step_ns) / 1e9 / double(m.waited)
                            : *l.step_mean_s;
    }
    if (m.batches > 0 && l.config.num_workers > 0) {
      l.ready_batches_mean = double(m.ready_sum) / double(m.batches);
      l.ready_batches_max = m.ready_max;
    }
    l.worker_batches = ws.batches;
    if (ws.batches > 0) any_worker_batches = any_worker_batches || l.config.num_workers > 0;
    if (ws.timed > 0) {
      l.fetch_mean_s = double(ws.fetch_ns) / 1e9 / double(ws.timed);
      if (ws.fetch_ns > 0) l.collate_share = double(ws.collate_ns) / double(ws.fetch_ns);
      if (ws.cpu_fetch_ns > 0)
        l.on_cpu_fraction = std::min(1.0, double(ws.cpu_ns) / double(ws.cpu_fetch_ns));
      if (ws.samples > 0) l.samples_per_batch = double(ws.samples) / double(ws.timed);
      if (ws.bytes_batches > 0) l.batch_bytes_mean = double(ws.bytes) / double(ws.bytes_batches);
      Percentiles p = percentiles(track.worker_batches_since(from));
      l.getitem_p50_ms = p.getitem_p50_ms;
      l.getitem_p99_ms = p.getitem_p99_ms;
      l.collate_p50_ms = p.collate_p50_ms;
      l.fetch_p50_ms = p.fetch_p50_ms;
      l.fetch_p99_ms = p.fetch_p99_ms;
      l.fetch_max_ms = p.fetch_max_ms;
    }
    if (m.stepped > 0) {
      l.wait_s = double(m.wait_ns) / 1e9;
      l.head_of_line_s = double(m.hol_ns) / 1e9;
      l.head_of_line_batches = m.hol_batches;
    }
    for (const auto& [wid, wt] : track.workers())
      if (wid >= 0 && wt.timed > 0) l.worker_fetch.push_back(worker_fetch(wid, wt, from));
    if (v.whole_run) {
      l.slowest_batches = track.slowest();
    } else {
      std::vector<WorkerBatchRecord> recent = track.worker_batches_since(from);
      const size_t k = std::min<size_t>(LoaderTrack::kSlowest, recent.size());
      std::partial_sort(recent.begin(), recent.begin() + ptrdiff_t(k), recent.end(),
                        [](const WorkerBatchRecord& a, const WorkerBatchRecord& b) {
                          return a.fetch_ns > b.fetch_ns;
                        });
      recent.resize(k);
      l.slowest_batches = std::move(recent);
    }
    if (auto it = slow_notes_.find(id); it != slow_notes_.end()) l.slow_notes = it->second;
    for (const EpochRecord& ep : track.epochs())
      if (v.whole_run || ep.start_ns >= v.from_ns) l.epochs.push_back(ep);
    l.worker_split = worker_split(track.epochs(), v.from_ns, v.to_ns);
    if (l.worker_split && m.wait_ns > 0)
      l.worker_split->short_handed_wait_share = double(m.short_wait_ns) / double(m.wait_ns);
    if (auto it = datasets_.find(id); it != datasets_.end()) l.dataset = it->second;
    l.worker_pids = worker_pids_locked(id, v.from_ns, v.to_ns);
    for (int pid : l.worker_pids) {
      if (auto it = memory_.find(pid); it != memory_.end()) {
        WorkerMemory wm;
        wm.pid = pid;
        if (auto w = worker_pids_.find(pid); w != worker_pids_.end()) wm.worker = w->second.worker;
        for (const MemoryPoint& p : it->second)
          if (v.whole_run || p.t_ns >= v.from_ns) wm.points.push_back(p);
        if (!wm.points.empty()) l.worker_memory.push_back(std::move(wm));
      }
      if (auto it = pools_.find(pid); it != pools_.end()) l.worker_pools.push_back(it->second);
    }
    if (l.config.main_pid > 0 &&
        std::find(main_pids.begin(), main_pids.end(), l.config.main_pid) == main_pids.end())
      main_pids.push_back(l.config.main_pid);
    if (l.config.num_workers > 0)
      l.fetchers = procs_.aggregate(l.worker_pids, from, v.to_ns);
    else if (l.config.main_pid > 0)
      l.fetchers = procs_.aggregate({l.config.main_pid}, from, v.to_ns);
    if (l.config.main_pid > 0) l.main = procs_.aggregate({l.config.main_pid}, from, v.to_ns);
    if (auto it = hot_.find(id); it != hot_.end()) l.hot_functions = it->second;
    configured_workers += l.config.num_workers;
    v.loaders.push_back(std::move(l));
  }
  v.total_workers = peak_workers_locked(v.from_ns, v.to_ns);
  // No worker pid was ever reported (hooks without worker events): fall back on the
  // configured counts of the loaders active in the window.
  if (!v.total_workers && any_worker_batches) v.total_workers = configured_workers;
  if (!v.total_workers && !v.loaders.empty() && configured_workers == 0) v.total_workers = 0;
  v.all_workers =
      procs_.aggregate(worker_pids_locked(std::nullopt, v.from_ns, v.to_ns), from, v.to_ns);
  v.main_process = procs_.aggregate(main_pids, from, v.to_ns);
  v.machine = procs_.machine(from, v.to_ns);
  if (v.whole_run) {
    const int64_t since = std::max(v.from_ns, v.to_ns - ProcessTrack::kKeepNs);
    v.cpu_use = {procs_.aggregate(main_pids, since, v.to_ns),
                 procs_.aggregate(worker_pids_locked(std::nullopt, since, v.to_ns), since, v.to_ns),
                 procs_.machine(since, v.to_ns)};
  } else {
    v.cpu_use = {v.main_process, v.all_workers, v.machine};
  }
  v.failures = failures_.view(from, v.to_ns);
  v.gpu = gpu_.view(from, v.to_ns);
  for (WorkerDeath& d : v.failures.deaths)
    if (d.pid > 0 && !d.rss_peak_bytes) d.rss_peak_bytes = procs_.rss_max(d.pid);
  return v;
}

JobView Session::view(int64_t now_ns, Window w) const {
  std::lock_guard<std::mutex> lock(mu_);
  return view_locked(now_ns, w);
}

std::vector<report::Finding> Session::findings(int64_t now_ns, Window w) const {
  std::string not_healthy;
  return findings(now_ns, w, not_healthy);
}

void Session::note_rank(uint16_t loader, RankId rank) {
  if (!rank.known()) return;
  std::lock_guard<std::mutex> lock(mu_);
  ranks_[loader] = rank;
}

int Session::rank_of(uint16_t loader) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ranks_.find(loader);
  return it == ranks_.end() ? -1 : it->second.shown();
}

int Session::rank_loader_locked(uint16_t loader) const {
  auto it = ranks_.find(loader);
  if (it == ranks_.end() || !it->second.known()) return 0;
  int n = 0;
  for (const auto& [id, r] : ranks_)  // loader ids grow in creation order, job-wide
    if (id <= loader && r.known() && r.shown() == it->second.shown()) ++n;
  return n;
}

void Session::label_ranks(std::vector<report::Finding>& findings) const {
  std::lock_guard<std::mutex> lock(mu_);
  for (report::Finding& f : findings) {
    if (f.loader < 0) continue;
    auto it = ranks_.find(uint16_t(f.loader));
    if (it == ranks_.end() || !it->second.known()) continue;
    f.rank = it->second.shown();
    // "Loader 3: ..." / "Worker 0 of loader 3 ...": the job-wide id becomes the rank's own.
    const int n = rank_loader_locked(uint16_t(f.loader));
    for (bool capital : {true, false}) {
      const std::string plain = loader_label(-1, f.loader, capital);
      for (size_t at = f.title.find(plain); at != std::string::npos;
           at = f.title.find(plain, at + 1)) {
        const size_t end = at + plain.size();
        if (end < f.title.size() && std::isdigit(uint8_t(f.title[end]))) continue;  // loader 31
        if (at > 0 && std::isalnum(uint8_t(f.title[at - 1]))) continue;
        if (at >= 3 && f.title.compare(at - 3, 3, "\xc2\xb7 ") == 0) continue;  // labelled
        const std::string label = loader_label(f.rank, n, capital);
        f.title.replace(at, plain.size(), label);
        at += label.size() - 1;
      }
    }
  }
}

std::vector<report::Finding> Session::findings(int64_t now_ns, Window w,
                                               std::string& not_healthy) const {
  JobView v = view(now_ns, w);  // rules run outside the lock: ingest is never held up
  not_healthy = not_healthy_note(v);
  std::vector<report::Finding> out = run_rules(v);
  label_ranks(out);  // every path to the findings labels their ranks
  return out;
}

std::string Session::verdict(const std::vector<report::Finding>& findings) {
  return analyze::verdict(findings);
}

std::vector<LoaderSummary> Session::loaders() const {
  std::lock_guard<std::mutex> lock(mu_);
  const JobView v = view_locked(0, Window::kWholeRun);
  std::vector<LoaderSummary> out;
  for (const auto& [id, track] : loaders_) {
    LoaderSummary s;
    s.id = id;
    s.config = track.config();
    if (auto r = ranks_.find(id); r != ranks_.end()) s.rank = r->second;
    s.rank_loader = rank_loader_locked(id);
    s.epochs = track.epochs_started();
    s.batches = track.main_total().batches;
    s.worker_exceptions = track.exceptions();
    s.worker_deaths = track.deaths();
    auto lv = std::find_if(v.loaders.begin(), v.loaders.end(),
                           [&](const LoaderView& l) { return l.loader == id; });
    if (lv != v.loaders.end()) {
      s.batches_per_s = lv->batches_per_s;
      if (lv->data_stall_fraction) s.data_stall_pct = *lv->data_stall_fraction * 100;
      s.getitem_p50_ms = lv->getitem_p50_ms;
      s.getitem_p99_ms = lv->getitem_p99_ms;
      s.collate_p50_ms = lv->collate_p50_ms;
      s.fetch_p50_ms = lv->fetch_p50_ms;
      if (lv->step_mean_s) s.consumer_step_ms = *lv->step_mean_s * 1e3;
      s.batch_bytes = lv->batch_bytes_mean;
      s.worker_on_cpu_fraction = lv->on_cpu_fraction;
      s.worker_cpu_pct = lv->fetchers.cpu_pct;
      s.runq_delay_pct = lv->fetchers.runq_delay_pct;
      if (lv->fetchers.read_bytes_per_s) s.read_mb_per_s = *lv->fetchers.read_bytes_per_s / 1e6;
      s.worker_pids = lv->worker_pids;
    }
    const MainSums& m = track.main_total();
    if (m.pinned > 0) s.pin_memory_ms = double(m.pin_ns) / 1e6 / double(m.pinned);
    for (const auto& [wid, wt] : track.workers()) {
      WorkerSummary w;
      w.worker = wid;
      w.pid = wt.pid;
      w.batches = wt.batches;
      if (wt.timed > 0) w.fetch_mean_ms = double(wt.fetch_ns) / 1e6 / double(wt.timed);
      if (wt.cpu_fetch_ns > 0)
        w.on_cpu_fraction = std::min(1.0, double(wt.cpu_ns) / double(wt.cpu_fetch_ns));
      std::vector<double> recent;
      wt.recent_fetch_ns.for_each([&](int64_t ns) { recent.push_back(double(ns) / 1e6); });
      w.fetch_recent_p50_ms = quantile(recent, 0.5);
      s.workers.push_back(w);
    }
    for (const EpochRecord& ep : track.epochs()) {
      if (!ep.first_batch_latency_ns) continue;
      const double ms = double(*ep.first_batch_latency_ns) / 1e6;
      if (!s.first_batch_latency_ms) s.first_batch_latency_ms = ms;
      s.first_batch_latency_ms_per_epoch.push_back(ms);
    }
    out.push_back(std::move(s));
  }
  return out;
}

int64_t Session::latest_ns() const {
  std::lock_guard<std::mutex> lock(mu_);
  return latest_ns_;
}

bool Session::any_loader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return !loaders_.empty();
}

int64_t Session::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

}  // namespace dldoctor::analyze
