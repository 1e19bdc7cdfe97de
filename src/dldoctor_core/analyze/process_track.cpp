// Folding sampler passes into a short ring and per-pid running sums.
#include "dldoctor_core/analyze/process_track.hpp"

#include <algorithm>
#include <unordered_set>

namespace dldoctor::analyze {

void ProcessTrack::ingest(const sample::Snapshot& s) {
  ++passes_;
  latest_ns_ = std::max(latest_ns_, s.t_ns);
  Pass p;
  p.t_ns = s.t_ns;
  p.seq = passes_;
  p.machine = s.machine;
  p.procs.reserve(s.processes.size());
  for (const sample::ProcessSample& ps : s.processes) {
    if (ps.open_fds) p.open_fds.emplace_back(ps.pid, *ps.open_fds);
    const std::optional<double> threads =
        ps.num_threads > 0 ? std::optional<double>(ps.num_threads) : std::nullopt;
    const std::optional<double> active =
        ps.active_threads ? std::optional<double>(*ps.active_threads) : std::nullopt;
    p.procs.push_back(Proc{ps.pid, ps.cpu_pct, ps.runq_delay_pct, ps.involuntary_cs_per_s,
                           ps.voluntary_cs_per_s, ps.read_bytes_per_s, ps.rchar_per_s, threads,
                           active, ps.runq_wait_per_slice_us, ps.rss_bytes});
    auto it = pids_.find(ps.pid);
    if (it == pids_.end()) {
      if (pids_.size() >= kMaxPids) continue;
      it = pids_.emplace(ps.pid, PidTotals{}).first;
      it->second.first_ns = s.t_ns;
      it->second.first_seq = passes_;
    }
    PidTotals& t = it->second;
    t.last_ns = s.t_ns;
    t.last_seq = passes_;
    ++t.samples;
    t.cpu.add(ps.cpu_pct);
    t.runq.add(ps.runq_delay_pct);
    t.ics.add(ps.involuntary_cs_per_s);
    t.vcs.add(ps.voluntary_cs_per_s);
    t.read_bps.add(ps.read_bytes_per_s);
    t.rchar_ps.add(ps.rchar_per_s);
    t.threads.add(threads);
    t.active.add(active);
    t.wait_per_slice.add(ps.runq_wait_per_slice_us);
    if (ps.open_fds) t.open_fds_max = std::max(t.open_fds_max.value_or(0), *ps.open_fds);
    if (ps.rss_bytes) t.rss_max = std::max(t.rss_max.value_or(0), *ps.rss_bytes);
  }
  m_cpu_busy_.add(s.machine.cpu_busy_pct);
  m_cpu_steal_.add(s.machine.cpu_steal_pct);
  m_io_.add(s.machine.io_pressure_some);
  m_cpu_p_.add(s.machine.cpu_pressure_some);
  m_mem_p_.add(s.machine.mem_pressure_some);
  m_swap_in_.add(s.machine.swap_in_per_s);
  m_swap_out_.add(s.machine.swap_out_per_s);
  if (s.machine.shm_total_bytes) m_shm_total_ = s.machine.shm_total_bytes;
  if (const auto& u = s.machine.shm_used_bytes) {
    m_shm_max_ = std::max(m_shm_max_.value_or(*u), *u);
    m_shm_min_ = std::min(m_shm_min_.value_or(*u), *u);
  }
  if (s.machine.mem_available_bytes) m_mem_last_ = s.machine.mem_available_bytes;
  if (s.machine.mem_available_bytes)
    m_mem_min_ = std::min(m_mem_min_.value_or(*s.machine.mem_available_bytes),
                          *s.machine.mem_available_bytes);

  passes_kept_.push_back(std::move(p));
  while (!passes_kept_.empty() && (passes_kept_.size() > kKeepPasses ||
                                   passes_kept_.front().t_ns < latest_ns_ - kKeepNs))
    passes_kept_.pop_front();
}

namespace {
void set_mean(std::optional<double>& out, double sum, int n) {
  if (n) out = sum / n;
}
}  // namespace

ProcAgg ProcessTrack::aggregate(const std::vector<int>& pids, int64_t from_ns,
                                int64_t to_ns) const {
  ProcAgg a;
  if (pids.empty()) return a;
  const std::unordered_set<int> want(pids.begin(), pids.end());
  double cpu = 0, runq = 0, ics = 0, vcs = 0, reads = 0, rchar = 0, threads = 0, active = 0,
         per_slice = 0;
  int n_cpu = 0, n_runq = 0, n_ics = 0, n_vcs = 0, n_reads = 0, n_rchar = 0, n_threads = 0,
      n_active = 0, n_per_slice = 0;
  std::unordered_map<int, std::pair<double, int>> active_each;  // pid -> (sum, n)

  if (from_ns < 0) {
    int64_t first_seq = 0, last_seq = 0;
    for (int pid : want) {
      auto it = pids_.find(pid);
      if (it == pids_.end()) continue;
      const PidTotals& t = it->second;
      ++a.processes;
      a.samples += t.samples;
      if (!first_seq || t.first_seq < first_seq) first_seq = t.first_seq;
      last_seq = std::max(last_seq, t.last_seq);
      cpu += t.cpu.sum, n_cpu += t.cpu.n;
      runq += t.runq.sum, n_runq += t.runq.n;
      ics += t.ics.sum, n_ics += t.ics.n;
      vcs += t.vcs.sum, n_vcs += t.vcs.n;
      reads += t.read_bps.sum, n_reads += t.read_bps.n;
      rchar += t.rchar_ps.sum, n_rchar += t.rchar_ps.n;
      threads += t.threads.sum, n_threads += t.threads.n;
      active += t.active.sum, n_active += t.active.n;
      per_slice += t.wait_per_slice.sum, n_per_slice += t.wait_per_slice.n;
      if (t.active.n) active_each[pid] = {t.active.sum, t.active.n};
      if (auto m = t.cpu.mean()) a.cpu_pct_each.emplace_back(pid, *m);
      if (t.open_fds_max && (!a.open_fds_max || *t.open_fds_max > *a.open_fds_max)) {
        a.open_fds_max = t.open_fds_max;
        a.open_fds_max_pid = pid;
      }
      if (t.open_fds_max) a.open_fds_peak_sum = a.open_fds_peak_sum.value_or(0) + *t.open_fds_max;
      if (t.rss_max) a.rss_peak_sum = a.rss_peak_sum.value_or(0) + *t.rss_max;
    }
    // Rates of the set together: each pass's sum, averaged over the passes that spanned
    // the set's lifetime (a pid absent from a pass read nothing in it).
    const double passes = double(last_seq - first_seq + 1);
    if (n_reads && a.processes) a.read_bytes_per_s = reads / passes;
    if (n_rchar && a.processes) a.rchar_per_s = rchar / passes;
  } else {
    std::unordered_map<int, std::pair<double, int>> each;
    std::unordered_map<int, int64_t> fds_peak, rss_peak;  // pid -> most in the window
    int passes_reads = 0, passes_rchar = 0;
    std::unordered_set<int> seen;
    for (const Pass& p : passes_kept_) {
      if (p.t_ns < from_ns || p.t_ns > to_ns) continue;
      double pass_reads = 0, pass_rchar = 0;
      bool any_reads = false, any_rchar = false;
      for (const Proc& pr : p.procs) {
        if (!want.count(pr.pid)) continue;
        seen.insert(pr.pid);
        ++a.samples;
        if (pr.cpu_pct) {
          cpu += *pr.cpu_pct, ++n_cpu;
          auto& e = each[pr.pid];
          e.first += *pr.cpu_pct, ++e.second;
        }
        if (pr.runq_delay_pct) runq += *pr.runq_delay_pct, ++n_runq;
        if (pr.wait_per_slice) per_slice += *pr.wait_per_slice, ++n_per_slice;
        if (pr.ics) ics += *pr.ics, ++n_ics;
        if (pr.vcs) vcs += *pr.vcs, ++n_vcs;
        if (pr.read_bps) pass_reads += *pr.read_bps, any_reads = true, ++n_reads;
        if (pr.rchar_ps) pass_rchar += *pr.rchar_ps, any_rchar = true, ++n_rchar;
        if (pr.rss) rss_peak[pr.pid] = std::max(rss_peak[pr.pid], *pr.rss);
        if (pr.threads) threads += *pr.threads, ++n_threads;
        if (pr.active_threads) {
          active += *pr.active_threads, ++n_active;
          auto& e = active_each[pr.pid];
          e.first += *pr.active_threads, ++e.second;
        }
      }
      for (const auto& [pid, fds] : p.open_fds) {
        if (!want.count(pid)) continue;
        fds_peak[pid] = std::max(fds_peak[pid], fds);
        if (!a.open_fds_max || fds > *a.open_fds_max) {
          a.open_fds_max = fds;
          a.open_fds_max_pid = pid;
        }
      }
      if (any_reads) reads += pass_reads, ++passes_reads;
      if (any_rchar) rchar += pass_rchar, ++passes_rchar;
    }
    a.processes = int(seen.size());
    if (passes_reads) a.read_bytes_per_s = reads / passes_reads;
    if (passes_rchar) a.rchar_per_s = rchar / passes_rchar;
    for (const auto& [pid, e] : each) a.cpu_pct_each.emplace_back(pid, e.first / e.second);
    for (const auto& [pid, n] : fds_peak) a.open_fds_peak_sum = a.open_fds_peak_sum.value_or(0) + n;
    for (const auto& [pid, n] : rss_peak) a.rss_peak_sum = a.rss_peak_sum.value_or(0) + n;
  }
  set_mean(a.cpu_pct, cpu, n_cpu);
  set_mean(a.runq_delay_pct, runq, n_runq);
  set_mean(a.runq_wait_per_slice_us, per_slice, n_per_slice);
  set_mean(a.involuntary_cs_per_s, ics, n_ics);
  set_mean(a.voluntary_cs_per_s, vcs, n_vcs);
  set_mean(a.threads, threads, n_threads);
  set_mean(a.active_threads, active, n_active);
  for (const auto& [pid, e] : active_each)
    if (e.second) a.active_threads_max = std::max(a.active_threads_max.value_or(0), e.first / e.second);
  std::sort(a.cpu_pct_each.begin(), a.cpu_pct_each.end());
  return a;
}

MachineAgg ProcessTrack::machine(int64_t from_ns, int64_t to_ns) const {
  MachineAgg m;
  if (from_ns < 0) {
    m.passes = int(passes_);
    m.cpu_busy_pct = m_cpu_busy_.mean();
    m.cpu_steal_pct = m_cpu_steal_.mean();
    m.io_pressure_some = m_io_.mean();
    m.cpu_pressure_some = m_cpu_p_.mean();
    m.mem_pressure_some = m_mem_p_.mean();
    m.mem_available_min_bytes = m_mem_min_;
    m.shm_total_bytes = m_shm_total_;
    m.shm_used_max_bytes = m_shm_max_;
    m.shm_used_min_bytes = m_shm_min_;
    m.swap_in_per_s = m_swap_in_.mean();
    m.swap_out_per_s = m_swap_out_.mean();
    m.mem_available_last_bytes = m_mem_last_;
    return m;
  }
  Sum busy, steal, io, cpu_p, mem_p, swap_in, swap_out;
  for (const Pass& p : passes_kept_) {
    if (p.t_ns < from_ns || p.t_ns > to_ns) continue;
    ++m.passes;
    busy.add(p.machine.cpu_busy_pct);
    steal.add(p.machine.cpu_steal_pct);
    io.add(p.machine.io_pressure_some);
    cpu_p.add(p.machine.cpu_pressure_some);
    mem_p.add(p.machine.mem_pressure_some);
    swap_in.add(p.machine.swap_in_per_s);
    swap_out.add(p.machine.swap_out_per_s);
    if (p.machine.shm_total_bytes) m.shm_total_bytes = p.machine.shm_total_bytes;
    if (const auto& u = p.machine.shm_used_bytes) {
      m.shm_used_max_bytes = std::max(m.shm_used_max_bytes.value_or(*u), *u);
      m.shm_used_min_bytes = std::min(m.shm_used_min_bytes.value_or(*u), *u);
    }
    if (p.machine.mem_available_bytes) m.mem_available_last_bytes = p.machine.mem_available_bytes;
    if (p.machine.mem_available_bytes)
      m.mem_available_min_bytes = std::min(
          m.mem_available_min_bytes.value_or(*p.machine.mem_available_bytes),
          *p.machine.mem_available_bytes);
  }
  m.cpu_busy_pct = busy.mean();
  m.cpu_steal_pct = steal.mean();
  m.io_pressure_some = io.mean();
  m.cpu_pressure_some = cpu_p.mean();
  m.mem_pressure_some = mem_p.mean();
  m.swap_in_per_s = swap_in.mean();
  m.swap_out_per_s = swap_out.mean();
  return m;
}

std::optional<int64_t> ProcessTrack::rss_max(int pid) const {
  auto it = pids_.find(pid);
  if (it == pids_.end()) return std::nullopt;
  return it->second.rss_max;
}

std::optional<std::pair<int64_t, int64_t>> ProcessTrack::seen(int pid) const {
  auto it = pids_.find(pid);
  if (it == pids_.end()) return std::nullopt;
  return std::make_pair(it->second.first_ns, it->second.last_ns);
}

std::optional<bool> ProcessTrack::alive_in_latest(int pid) const {
  if (passes_kept_.empty()) return std::nullopt;
  auto it = pids_.find(pid);
  return it != pids_.end() && it->second.last_seq == passes_;
}

}  // namespace dldoctor::analyze
