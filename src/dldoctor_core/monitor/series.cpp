// Runs on the drain and sampler threads: per event a map lookup and a few additions, per
// pass one walk of the pass's processes. Rates are derived only when data() is asked for.
#include "dldoctor_core/monitor/series.hpp"

#include <algorithm>

namespace dldoctor::monitor {

namespace {
/// Pids whose role is remembered; a run that forks more (many short epochs of many workers)
/// stops learning new ones rather than growing without bound.
constexpr size_t kMaxKnownPids = 65536;
/// Pids listed per process series (one per epoch without persistent workers).
constexpr size_t kMaxPidsListed = 64;

std::optional<double> as_double(const std::optional<int64_t>& v) {
  return v ? std::optional<double>(double(*v)) : std::nullopt;
}
}  // namespace

void SeriesRecorder::start(int64_t t0_ns) {
  std::lock_guard<std::mutex> lock(mu_);
  if (started_) return;
  started_ = true;
  t0_ns_ = t0_ns;
}

size_t SeriesRecorder::point_locked(int64_t t_ns) {
  if (!started_) {
    started_ = true;
    t0_ns_ = t_ns;
  }
  latest_ns_ = std::max(latest_ns_, t_ns);
  size_t i = t_ns <= t0_ns_ ? 0 : size_t((t_ns - t0_ns_) / width_ns_);
  while (i >= kMaxSeriesPoints) {
    compact_locked();
    i = size_t((t_ns - t0_ns_) / width_ns_);
  }
  points_ = std::max(points_, i + 1);
  return i;
}

void SeriesRecorder::compact_locked() {
  auto halve = [](auto& v) {
    using P = typename std::decay_t<decltype(v)>::value_type;
    std::vector<P> out((v.size() + 1) / 2);
    for (size_t i = 0; i < v.size(); ++i) out[i / 2] += v[i];
    v.swap(out);
  };
  for (auto& [id, l] : loaders_) halve(l.points);
  for (auto& [key, p] : procs_) halve(p.points);
  for (auto& [index, g] : gpus_) halve(g.points);
  halve(machine_);
  points_ = (points_ + 1) / 2;
  width_ns_ *= 2;
}

SeriesRecorder::ProcRec* SeriesRecorder::proc_locked(const ProcKey& key, int pid) {
  auto it = procs_.find(key);
  if (it == procs_.end()) {
    if (procs_.size() >= kMaxProcessSeries) {
      procs_cut_ = true;
      return nullptr;
    }
    it = procs_.emplace(key, ProcRec{}).first;
  }
  ProcRec& p = it->second;
  if (pid > 0 && std::find(p.pids.begin(), p.pids.end(), pid) == p.pids.end() &&
      p.pids.size() < kMaxPidsListed) {
    p.pids.push_back(pid);
  }
  return &p;
}

void SeriesRecorder::ingest(const std::vector<trace::Event>& events) {
  using trace::EventKind;
  std::lock_guard<std::mutex> lock(mu_);
  for (const trace::Event& e : events) {
    const int pid = static_cast<int>(e.pid);
    switch (e.kind) {
      case EventKind::kIterStart: {
        LoaderRec& l = loaders_[e.loader];
        l.num_workers = e.worker;
        l.fill.on_iter_start(e.worker);
        l.main_pid = static_cast<int>(e.v[1]);
        if (l.main_pid > 0 && pid_key_.size() < kMaxKnownPids) {
          const ProcKey key{-1, -1, l.main_pid};
          pid_key_[l.main_pid] = key;
          proc_locked(key, l.main_pid);
        }
        break;
      }
      case EventKind::kWorkerStart: {
        if (e.worker < 0) break;
        const ProcKey key{e.loader, e.worker, 0};
        if (pid_key_.size() < kMaxKnownPids) pid_key_[pid] = key;
        proc_locked(key, pid);
        break;
      }
      case EventKind::kWorkerBatch: {
        // worker -1: the main process fetched it itself (num_workers=0).
        const ProcKey key = e.worker >= 0 ? ProcKey{e.loader, e.worker, 0} : ProcKey{-1, -1, pid};
        if (pid_key_.size() < kMaxKnownPids) pid_key_.emplace(pid, key);
        ProcRec* p = proc_locked(key, pid);
        if (p == nullptr) break;
        p->batches += trace::batches_of(e);  // a sampled fast stream: the fetches it stands for
        const int64_t fetch_ns = e.v[0], collate_ns = e.v[1];
        if ((e.flags & trace::kProfiled) || fetch_ns < 0) break;  // profiled: twice as slow
        const int64_t t_end = e.t_ns + fetch_ns;
        ProcPoint& pt = at(p->points, point_locked(t_end));
        if (e.count > 0 && collate_ns >= 0 && fetch_ns >= collate_ns) {
          const double getitem_ms = double(fetch_ns - collate_ns) / 1e6 / double(e.count);
          pt.getitem_ms.add(getitem_ms);
          p->getitem_sample.push(float(getitem_ms));
          p->last_getitem_ms = getitem_ms;
          if (Mean* m = p->live_getitem.at(t_end)) m->add(getitem_ms);
        }
        if (collate_ns >= 0) {
          const double collate_ms = double(collate_ns) / 1e6;
          pt.collate_ms.add(collate_ms);
          p->collate_sample.push(float(collate_ms));
        }
        break;
      }
      case EventKind::kMainBatch: {
        LoaderRec& l = loaders_[e.loader];
        const int64_t n = trace::batches_of(e);  // a sampled fast loop: hand-outs it stands for
        l.batches += n;
        const int64_t handed = e.t_ns + std::max<int64_t>(e.v[0], 0);
        LoaderPoint b;
        b.batches = n;
        if (!l.fill.filling(e) && e.v[0] >= 0) {  // start-up is not the loader's pace
          b.stepped = n;
          b.wait_ns = n * e.v[0];
          b.step_ns = n * e.v[1];
        }
        at(l.points, point_locked(handed)) += b;
        if (LoaderPoint* s = l.live.at(handed)) *s += b;
        break;
      }
      case EventKind::kIterEnd:  // a sampled single-process loop's hand-outs not yet counted
        if (e.v[3] > 0) loaders_[e.loader].batches += e.v[3];
        break;
      default:
        break;
    }
  }
}

void SeriesRecorder::ingest(const sample::Snapshot& s) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t i = point_locked(s.t_ns);
  ++last_pass_;
  MachinePoint& m = at(machine_, i);
  m.cpu_busy.add(s.machine.cpu_busy_pct);
  m.shm_used.add(as_double(s.machine.shm_used_bytes));
  m.mem_available.add(as_double(s.machine.mem_available_bytes));
  last_machine_ = s.machine;
  std::optional<double> read_bps, rchar_bps;
  for (const sample::ProcessSample& ps : s.processes) {
    if (ps.read_bytes_per_s) read_bps = read_bps.value_or(0) + *ps.read_bytes_per_s;
    if (ps.rchar_per_s) rchar_bps = rchar_bps.value_or(0) + *ps.rchar_per_s;
    auto k = pid_key_.find(ps.pid);
    if (k == pid_key_.end()) continue;  // not a worker or main process we were told of
    ProcRec* p = proc_locked(k->second, ps.pid);
    if (p == nullptr) continue;
    ProcPoint& pt = at(p->points, i);
    pt.cpu.add(ps.cpu_pct);
    pt.runq.add(ps.runq_delay_pct);
    pt.state = ps.state;
    p->seen_pass = last_pass_;
    p->last_pid = ps.pid;
    p->state = ps.state;
    p->cpu_pct = ps.cpu_pct;
    p->runq_delay_pct = ps.runq_delay_pct;
  }
  m.read_bps.add(read_bps);
  m.rchar_bps.add(rchar_bps);
  last_gpu_ = s.gpu;
  gpu_measured_ = gpu_measured_ || s.gpu.measured;
  for (const sample::GpuSample& g : s.gpu.devices) {
    if (!gpus_.count(g.index) && gpus_.size() >= kMaxGpus) continue;
    GpuRec& r = gpus_[g.index];
    GpuPoint& pt = at(r.points, i);
    pt.util.add(g.utilization_pct);
    pt.used.add(as_double(g.memory_used_bytes));
    pt.job.add(as_double(g.tree_memory_bytes));
    if (g.memory_total_bytes) r.total = g.memory_total_bytes;
    r.job = r.job || !g.tree_pids.empty();
  }
}

SeriesData SeriesRecorder::data() const {
  std::lock_guard<std::mutex> lock(mu_);
  SeriesData d;
  d.t0_ns = t0_ns_;
  d.width_ns = width_ns_;
  d.processes_cut = procs_cut_;
  const size_t n = points_;
  auto start_of = [&](size_t i) { return t0_ns_ + int64_t(i) * width_ns_; };
  // The newest point ends at the newest time seen: its rates are over what it covers.
  auto end_of = [&](size_t i) {
    return std::min(start_of(i + 1), std::max(latest_ns_, start_of(i)));
  };
  for (size_t i = 0; i < n; ++i) {
    d.t_s.push_back(double((start_of(i) + end_of(i)) / 2 - t0_ns_) / 1e9);
  }

  const size_t k = size_t(std::max<int64_t>(1, (kRateWindowNs + width_ns_ - 1) / width_ns_));
  for (const auto& [id, l] : loaders_) {
    LoaderSeries ls;
    ls.loader = id;
    ls.batches = l.batches;
    ls.batches_per_s.assign(n, std::nullopt);
    ls.data_stall_pct.assign(n, std::nullopt);
    std::optional<size_t> first;
    for (size_t i = 0; i < n; ++i) {
      if (i < l.points.size() && l.points[i].batches > 0 && !first) first = i;
      if (!first) continue;  // before its first batch the loader has no rate, not a 0 one
      LoaderPoint sum;
      const size_t lo = std::max(*first, i + 1 >= k ? i + 1 - k : 0);
      for (size_t j = lo; j <= i && j < l.points.size(); ++j) sum += l.points[j];
      const int64_t covered = end_of(i) - start_of(lo);
      if (covered > 0) ls.batches_per_s[i] = double(sum.batches) / (double(covered) / 1e9);
      if (sum.stepped > 0 && sum.wait_ns + sum.step_ns > 0) {
        ls.data_stall_pct[i] = 100.0 * double(sum.wait_ns) / double(sum.wait_ns + sum.step_ns);
      }
    }
    d.loaders.push_back(std::move(ls));
  }

  for (const auto& [key, p] : procs_) {
    ProcessSeries ps;
    const auto& [loader, worker, main_pid] = key;
    ps.role = main_pid > 0 ? "main" : "worker";
    ps.loader = loader;
    ps.worker = worker;
    ps.pids = p.pids;
    ps.batches = p.batches;
    ps.cpu_pct.assign(n, std::nullopt);
    ps.runq_delay_pct.assign(n, std::nullopt);
    ps.getitem_ms.assign(n, std::nullopt);
    ps.collate_ms.assign(n, std::nullopt);
    ps.state.assign(n, ' ');
    for (size_t i = 0; i < n && i < p.points.size(); ++i) {
      const ProcPoint& pt = p.points[i];
      ps.cpu_pct[i] = pt.cpu.get();
      ps.runq_delay_pct[i] = pt.runq.get();
      ps.getitem_ms[i] = pt.getitem_ms.get();
      ps.collate_ms[i] = pt.collate_ms.get();
      if (pt.state) ps.state[i] = pt.state;
    }
    ps.getitem_ms_sample = p.getitem_sample.items();
    ps.collate_ms_sample = p.collate_sample.items();
    d.processes.push_back(std::move(ps));
  }

  MachineSeries& ms = d.machine;
  for (size_t i = 0; i < n; ++i) {
    const MachinePoint pt = i < machine_.size() ? machine_[i] : MachinePoint{};
    ms.cpu_busy_pct.push_back(pt.cpu_busy.get());
    ms.shm_used_bytes.push_back(pt.shm_used.get());
    ms.mem_available_bytes.push_back(pt.mem_available.get());
    auto mb = [](std::optional<double> v) {
      return v ? std::optional<double>(*v / 1e6) : std::nullopt;
    };
    ms.read_mb_per_s.push_back(mb(pt.read_bps.get()));
    ms.rchar_mb_per_s.push_back(mb(pt.rchar_bps.get()));
  }
  ms.shm_total_bytes = last_machine_.shm_total_bytes;

  for (const auto& [index, r] : gpus_) {
    GpuSeries g;
    g.index = index;
    g.memory_total_bytes = r.total;
    g.job = r.job;
    for (size_t i = 0; i < n; ++i) {
      const GpuPoint pt = i < r.points.size() ? r.points[i] : GpuPoint{};
      g.utilization_pct.push_back(pt.util.get());
      g.memory_used_bytes.push_back(pt.used.get());
      g.job_memory_bytes.push_back(pt.job.get());
    }
    d.gpus.push_back(std::move(g));
  }
  if (!gpu_measured_) d.gpu_not_measured = last_gpu_.not_measured;
  return d;
}

LiveData SeriesRecorder::live(int64_t now_ns) const {
  std::lock_guard<std::mutex> lock(mu_);
  LiveData d;
  d.t_ns = now_ns;
  d.window_s = double(kLiveWindowNs) / 1e9;
  const int64_t from = now_ns - kLiveWindowNs;
  for (const auto& [id, l] : loaders_) {
    LiveData::Loader out;
    out.loader = id;
    out.num_workers = l.num_workers;
    out.batches = l.batches;
    const LoaderPoint sum = l.live.sum(from, now_ns);
    if (l.batches > 0) out.batches_per_s = double(sum.batches) / d.window_s;
    if (sum.stepped > 0 && sum.wait_ns + sum.step_ns > 0) {
      out.data_stall_pct = 100.0 * double(sum.wait_ns) / double(sum.wait_ns + sum.step_ns);
    }
    d.loaders.push_back(out);
  }
  for (const auto& [key, p] : procs_) {
    const Mean recent = p.live_getitem.sum(from, now_ns);
    const bool in_pass = last_pass_ > 0 && p.seen_pass == last_pass_;
    if (!in_pass && recent.n == 0) continue;  // a worker of an earlier epoch, or gone
    LiveData::Process out;
    const auto& [loader, worker, main_pid] = key;
    out.role = main_pid > 0 ? "main" : "worker";
    out.loader = loader;
    out.worker = worker;
    out.pid = p.last_pid ? p.last_pid : (p.pids.empty() ? 0 : p.pids.back());
    out.batches = p.batches;
    if (in_pass) {
      out.state = p.state;
      out.cpu_pct = p.cpu_pct;
      out.runq_delay_pct = p.runq_delay_pct;
    }
    out.getitem_ms = recent.n ? recent.get() : p.last_getitem_ms;
    d.processes.push_back(out);
  }
  d.cpu_busy_pct = last_machine_.cpu_busy_pct;
  d.shm_used_bytes = last_machine_.shm_used_bytes;
  d.shm_total_bytes = last_machine_.shm_total_bytes;
  d.mem_available_bytes = last_machine_.mem_available_bytes;
  for (const sample::GpuSample& g : last_gpu_.devices) {
    LiveData::Gpu out;
    out.index = g.index;
    out.utilization_pct = g.utilization_pct;
    out.memory_used_bytes = g.memory_used_bytes;
    out.memory_total_bytes = g.memory_total_bytes;
    out.job_memory_bytes = g.tree_memory_bytes;
    out.job = !g.tree_pids.empty();
    d.gpus.push_back(out);
  }
  if (!last_gpu_.measured) d.gpu_not_measured = last_gpu_.not_measured;
  return d;
}

}  // namespace dldoctor::monitor
