// Synthetic event streams and sampler passes for the analyzer's tests: a loader in steady
// state (W workers, fetch F per batch, consumer step S) produces the events the hooks
// would write, with the waits a real pipeline would show; passes carry the figures a
// sampler would read. Deterministic, so every threshold edge is exact.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "dldoctor_core/analyze/session.hpp"

namespace dldoctor::analyze::sim {

inline constexpr int64_t kMs = 1'000'000;
inline constexpr int64_t kS = 1'000'000'000;
inline constexpr int64_t kT0 = 1000 * kS;  // a CLOCK_MONOTONIC-like origin

inline trace::Event event(trace::EventKind kind, int pid, int64_t t, uint16_t loader,
                          int worker, int index, uint32_t count, int64_t v0, int64_t v1 = 0,
                          int64_t v2 = 0, int64_t v3 = 0, uint8_t flags = 0) {
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
  double fetch_ms = 10;                 ///< per batch, per worker (getitem + collate)
  double collate_ms = 1;
  std::optional<double> on_cpu = 0.95;  ///< share of the fetch on CPU; empty: unknown (-1)
  double step_ms = 20;                  ///< the consumer's own time per batch
  std::optional<double> wait_ms;        ///< overrides the modelled wait per batch
  int main_pid = 1000;
  int worker_pid0 = 2000;
  double jitter = 0.2;                  ///< ± share of getitem varied deterministically

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
      s.ingest(event(trace::EventKind::kWorkerStart, l.worker_pid(w), t0, l.id, w, -1, 0,
                     l.main_pid));
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
    const int64_t w_ns = first ? int64_t(l.fetch_ms * kMs) : int64_t(wait * kMs);
    handed = t + w_ns;
    const int worker = l.num_workers ? i % l.num_workers : -1;
    s.ingest(event(trace::EventKind::kWorkerBatch, l.worker_pid(std::max(worker, 0)),
                   handed - fetch, l.id, worker, i, uint32_t(l.batch_size), fetch,
                   int64_t(l.collate_ms * kMs),
                   l.on_cpu ? int64_t(*l.on_cpu * double(fetch)) : -1, 1 << 20));
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

}  // namespace dldoctor::analyze::sim
