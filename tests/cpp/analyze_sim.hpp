// Synthetic event streams and sampler passes for the analyzer's tests: a loader in steady
// state (W workers, fetch F per batch, consumer step S) produces the events the hooks
// would write, with the waits a real pipeline would show; passes carry the figures a
// sampler would read; notes carry what the side logs would. Deterministic, so every
// threshold edge is exact. Shared by tests/cpp/rules/<id>_test.cpp and analyze_test.cpp.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "dldoctor_core/analyze/session.hpp"

namespace dldoctor::analyze::sim {

inline constexpr int64_t kMs = 1'000'000;
inline constexpr int64_t kS = 1'000'000'000;
inline constexpr int64_t kT0 = 1000 * kS;  // a CLOCK_MONOTONIC-like origin

inline trace::Event event(trace::EventKind kind, int pid, int64_t t, uint16_t loader, int worker,
                          int index, uint32_t count, int64_t v0, int64_t v1 = 0, int64_t v2 = 0,
                          int64_t v3 = 0, uint8_t flags = 0) {
  trace::Event e;
  e.kind = kind;
  e.pid = uint32_t(pid);
  e.t_ns = t;
  e.loader = loader;
  e.worker = int16_t(worker);
  e.index = index;
  e.count = count;
  e.v[0] = v0;
  e.v[1] = v1;
  e.v[2] = v2;
  e.v[3] = v3;
  e.flags = flags;
  return e;
}

/// A loader in steady state.
struct Loader {
  uint16_t id = 0;
  int num_workers = 2;
  int batch_size = 32;
  int prefetch_factor = 2;
  uint8_t flags = trace::kInOrder;
  double fetch_ms = 10;  ///< per batch, per worker (getitem + collate)
  double collate_ms = 1;
  std::optional<double> on_cpu = 0.95;  ///< share of the fetch on CPU; empty: unknown (-1)
  double step_ms = 20;                  ///< the consumer's own time per batch
  std::optional<double> wait_ms;        ///< overrides the modelled wait per batch
  std::vector<double> wait_pattern_ms;  ///< overrides both: batch i waits [i % size]
  /// Each batch made 1 ms before the consumer asks for it (a queue that keeps up: its whole
  /// wait is the hand-over); else made just as it is handed out (the wait is for the worker).
  bool made_before_asked = false;
  int main_pid = 1000;
  int worker_pid0 = 2000;
  double jitter = 0.2;  ///< ± share of getitem varied deterministically

  int worker_pid(int w) const { return num_workers > 0 ? worker_pid0 + w : main_pid; }
  /// The wait per batch a pipeline of these figures shows.
  double modelled_wait_ms() const {
    if (wait_ms) return *wait_ms;
    if (num_workers == 0) return fetch_ms;  // serial: every fetch is waited for
    return std::max(0.0, fetch_ms / num_workers - step_ms);
  }
};

/// Feeds `seconds` of `l` from t0 (an iterator start, worker starts, then batches).
/// Returns the time of the last batch handed out.
inline int64_t feed(Session& s, const Loader& l, int64_t t0, double seconds,
                    bool iter_start = true) {
  if (iter_start) {
    s.ingest(event(trace::EventKind::kIterStart, l.main_pid, t0, l.id, l.num_workers,
                   l.num_workers ? l.prefetch_factor : 0, uint32_t(l.batch_size), 0, l.main_pid,
                   int64_t(trace::StartMethod::kFork), 0, l.flags));
    for (int w = 0; w < l.num_workers; ++w)
      s.ingest(
          event(trace::EventKind::kWorkerStart, l.worker_pid(w), t0, l.id, w, -1, 0, l.main_pid));
  }
  static constexpr double kPattern[] = {-1, -0.5, 0, 0.5, 1};
  const int64_t end = t0 + int64_t(seconds * kS);
  const double wait = l.modelled_wait_ms();
  int64_t t = t0;
  int64_t handed = t0;
  for (int i = 0; t < end; ++i) {
    const double getitem = (l.fetch_ms - l.collate_ms) * (1 + l.jitter * kPattern[i % 5]);
    const int64_t fetch = int64_t((getitem + l.collate_ms) * kMs);
    const bool first = i == 0 && iter_start;
    const double w_ms =
        l.wait_pattern_ms.empty() ? wait : l.wait_pattern_ms[i % l.wait_pattern_ms.size()];
    const int64_t w_ns = first ? int64_t(l.fetch_ms * kMs) : int64_t(w_ms * kMs);
    handed = t + w_ns;
    const int worker = l.num_workers ? i % l.num_workers : -1;
    const int64_t made = l.made_before_asked ? t - kMs : handed;
    s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(std::max(worker, 0)),
                   made - fetch, l.id, worker, i, uint32_t(l.batch_size), fetch,
                   int64_t(l.collate_ms * kMs), l.on_cpu ? int64_t(*l.on_cpu * double(fetch)) : -1,
                   1 << 20));
    s.ingest(event(trace::EventKind::kMainBatch, l.main_pid, t, l.id, -1, i, 0, w_ns,
                   first ? -1 : int64_t(l.step_ms * kMs), -1));
    t = handed + int64_t(l.step_ms * kMs);
  }
  return handed;
}

/// A process as the sampler would report it (empty: the field could not be read).
struct Proc {
  int pid = 0;
  int ppid = 1;
  std::optional<double> cpu_pct;
  std::optional<double> runq_delay_pct;
  std::optional<double> ics_per_s;
  std::optional<double> read_bytes_per_s;
  std::optional<double> rchar_per_s;
  std::optional<double> runq_wait_per_slice_us;
};

/// The main process and the workers of `l` with the given figures.
inline std::vector<Proc> procs(const Loader& l, std::optional<double> main_cpu,
                               std::optional<double> worker_cpu,
                               std::optional<double> worker_runq = std::nullopt,
                               std::optional<double> worker_ics = std::nullopt,
                               std::optional<double> worker_read = std::nullopt,
                               std::optional<double> worker_rchar = std::nullopt) {
  std::vector<Proc> out;
  out.push_back(Proc{l.main_pid, 1, main_cpu, 1.0, 2.0, 0.0, 0.0});
  for (int w = 0; w < l.num_workers; ++w)
    out.push_back(Proc{l.worker_pid(w), l.main_pid, worker_cpu, worker_runq, worker_ics,
                       worker_read, worker_rchar});
  return out;
}

/// Feeds passes every 100 ms over [t0, t0 + seconds).
inline void feed_passes(Session& s, int64_t t0, double seconds, const std::vector<Proc>& ps,
                        const sample::MachineSample& machine = {}) {
  const int64_t end = t0 + int64_t(seconds * kS);
  for (int64_t t = t0; t < end; t += 100 * kMs) {
    sample::Snapshot snap;
    snap.t_ns = t;
    snap.machine = machine;
    for (const Proc& p : ps) {
      sample::ProcessSample x;
      x.pid = p.pid;
      x.ppid = p.ppid;
      x.state = 'R';
      x.comm = "python";
      x.num_threads = 1;
      x.cpu_pct = p.cpu_pct;
      x.runq_delay_pct = p.runq_delay_pct;
      x.runq_wait_per_slice_us = p.runq_wait_per_slice_us;
      x.involuntary_cs_per_s = p.ics_per_s;
      x.voluntary_cs_per_s = 10.0;
      x.read_bytes_per_s = p.read_bytes_per_s;
      x.rchar_per_s = p.rchar_per_s;
      snap.processes.push_back(std::move(x));
    }
    s.ingest(snap);
  }
}

inline system::Facts facts(std::optional<double> usable) {
  system::Facts f;
  f.cpu.usable = usable;
  if (usable) f.cpu.affinity = int(*usable + 0.999);
  f.cpu.online = 64;  // deliberately larger: rules must never use it
  f.memory.available_bytes = int64_t(16) << 30;
  return f;
}

inline const report::Finding* find(const std::vector<report::Finding>& fs, const std::string& id) {
  for (const auto& f : fs)
    if (f.id == id) return &f;
  return nullptr;
}

inline std::optional<double> num(const report::Finding& f, const std::string& name) {
  for (const auto& e : f.evidence)
    if (e.name == name && std::holds_alternative<double>(e.value)) return std::get<double>(e.value);
  return std::nullopt;
}

inline std::optional<std::string> text(const report::Finding& f, const std::string& name) {
  for (const auto& e : f.evidence)
    if (e.name == name && std::holds_alternative<std::string>(e.value))
      return std::get<std::string>(e.value);
  return std::nullopt;
}

inline std::vector<std::string> ids(const std::vector<report::Finding>& fs) {
  std::vector<std::string> out;
  for (const auto& f : fs) out.push_back(f.id);
  return out;
}

// --- runs of the throughput rules -------------------------------------------------------------

struct Run {
  Session s;
  std::vector<report::Finding> whole, recent;
};

/// 20 s of `l` with passes of `ps`, analysed over the whole run and the last 10 s.
inline std::unique_ptr<Run> run(const Loader& l, const std::vector<Proc>& ps,
                                std::optional<double> usable, const sample::MachineSample& m = {},
                                std::vector<HotFunction> hot = {}) {
  auto r = std::make_unique<Run>();
  r->s.set_facts(facts(usable));
  if (!hot.empty()) r->s.add_hot_functions(l.id, hot);
  const int64_t end = feed(r->s, l, kT0, 20);
  if (!ps.empty()) feed_passes(r->s, kT0, 20, ps, m);
  r->whole = r->s.findings(0, Window::kWholeRun);
  r->recent = r->s.findings(end, Window::kRecent);
  return r;
}

/// Six workers on two usable CPUs, stretched by queueing for them.
inline Loader oversubscribed(double on_cpu = 0.3) {
  Loader l;
  l.num_workers = 6;  // on 2 usable CPUs
  l.fetch_ms = 300;   // wall time, stretched by queueing for a CPU
  l.on_cpu = on_cpu;
  l.step_ms = 20;
  return l;
}

/// Workers that compute their whole fetch and supply fewer batches than the loop asks for.
inline Loader cpu_bound(int workers = 2) {
  Loader l;
  l.num_workers = workers;
  l.fetch_ms = 100;  // 20 batches/s from 2 workers; the loop wants 50
  l.collate_ms = 1;
  l.on_cpu = 0.95;
  l.step_ms = 20;
  return l;
}

/// Workers that wait most of their fetch and supply fewer batches than the loop asks for.
inline Loader waiting(double on_cpu = 0.1) {
  Loader l;
  l.num_workers = 2;
  l.fetch_ms = 200;
  l.on_cpu = on_cpu;
  l.step_ms = 20;
  return l;
}

// --- failures: sessions with notes ------------------------------------------------------------

inline constexpr int64_t kMiB = int64_t(1) << 20;
inline constexpr int64_t kGiB = int64_t(1) << 30;

/// A session with `l` fed for 20 s (1 MiB batches), facts as given.
inline std::unique_ptr<Session> session(const Loader& l, const system::Facts& f) {
  auto s = std::make_unique<Session>();
  s->set_facts(f);
  feed(*s, l, kT0, 20);
  return s;
}

inline std::vector<report::Finding> whole(const Session& s) {
  return s.findings(0, Window::kWholeRun);
}

/// The ids of the warnings and critical findings.
inline std::vector<std::string> loud_ids(const std::vector<report::Finding>& fs) {
  std::vector<std::string> out;
  for (const auto& f : fs)
    if (f.severity != report::Severity::kInfo) out.push_back(f.id);
  return out;
}

inline ErrorNote error(std::string message, ErrorSource src = ErrorSource::kWorker,
                       std::string type = "builtins.RuntimeError") {
  ErrorNote e;
  e.source = src;
  e.loader = 0;
  e.type = std::move(type);
  e.message = std::move(message);
  e.t_ns = kT0 + 5 * kS;
  return e;
}

/// The main process's kWorkerDied event: exit code `code` or signal `sig` of worker `worker`.
inline trace::Event died(int worker, int pid, int64_t code, int64_t sig, uint16_t loader = 0) {
  return event(trace::EventKind::kWorkerDied, 1000, kT0 + 6 * kS, loader, worker, -1, 0, code, sig,
               pid);
}

/// The job's runtime facts at its loader's start: its fd limit and sharing strategy.
inline RuntimeNote runtime(std::optional<int64_t> soft, std::string strategy = "file_descriptor") {
  RuntimeNote r;
  r.loader = 0;
  r.pid = 1000;
  r.nofile_soft = soft;
  r.nofile_hard = soft;
  r.sharing_strategy = std::move(strategy);
  return r;
}

inline system::Facts memory_facts(int64_t total) {
  system::Facts f = facts(8);
  f.memory.total_bytes = total;
  f.memory.available_bytes = std::nullopt;
  return f;
}

/// 20 s of `l` on a machine with `total` bytes, `available` of them free, swapping and
/// stalled on memory as given.
inline std::vector<report::Finding> with_memory(const Loader& l, int64_t total, int64_t available,
                                                std::optional<double> swap_pages = std::nullopt,
                                                std::optional<double> pressure = std::nullopt) {
  auto s = session(l, memory_facts(total));
  sample::MachineSample m;
  m.mem_available_bytes = available;
  m.swap_in_per_s = swap_pages;
  m.swap_out_per_s = swap_pages;
  m.mem_pressure_some = pressure;
  feed_passes(*s, kT0, 20, procs(l, 10.0, 10.0), m);
  return whole(*s);
}

/// CUDA memory between steps: `peak` at the loader's batch size, `baseline` held, of `total`.
inline CudaMemoryNote cuda_note(int64_t peak, int64_t baseline, int64_t total) {
  CudaMemoryNote c;
  c.loader = 0;
  c.peak_bytes = peak;
  c.allocated_bytes = baseline;
  c.total_bytes = total;
  c.t_ns = kT0 + kS;
  return c;
}

// --- passes with thread and memory figures ------------------------------------------------------

/// A worker's figures in a sampler pass.
struct WorkerFigures {
  int num_threads = 1;
  std::optional<int> active_threads = 1;
  std::optional<double> runq = 2.0;
  std::optional<double> ics = 20.0;
  double cpu = 50;
};

/// A sampler pass of the main process and `l`'s workers with thread and memory figures.
inline void pass(Session& s, int64_t t, const Loader& l, const WorkerFigures& w,
                 std::optional<double> main_runq = 2.0,
                 std::vector<std::pair<int, int64_t>> private_dirty = {},
                 std::optional<int64_t> mem_available = std::nullopt,
                 std::vector<std::pair<int, int64_t>> rss = {}) {
  sample::Snapshot snap;
  snap.t_ns = t;
  snap.machine.mem_available_bytes = mem_available;
  sample::ProcessSample m;
  m.pid = l.main_pid;
  m.num_threads = 4;
  m.active_threads = 1;
  m.cpu_pct = 20;
  m.runq_delay_pct = main_runq;
  snap.processes.push_back(m);
  for (int i = 0; i < l.num_workers; ++i) {
    sample::ProcessSample p;
    p.pid = l.worker_pid(i);
    p.ppid = l.main_pid;
    p.state = 'R';
    p.num_threads = w.num_threads;
    p.active_threads = w.active_threads;
    p.cpu_pct = w.cpu;
    p.runq_delay_pct = w.runq;
    p.involuntary_cs_per_s = w.ics;
    p.rss_bytes = int64_t(2048) * kMiB;
    for (auto [pid, bytes] : rss)
      if (pid == p.pid) p.rss_bytes = bytes;
    for (auto [pid, pd] : private_dirty)
      if (pid == p.pid) {
        p.smaps_fresh = true;
        p.private_dirty_bytes = pd;
        p.pss_bytes = pd + 100 * kMiB;
      }
    snap.processes.push_back(p);
  }
  s.ingest(snap);
}

}  // namespace dldoctor::analyze::sim
