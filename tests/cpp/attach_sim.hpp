// Synthetic attached jobs for the attach tests: stacks shaped as py-spy reads them from a
// DataLoader's processes (the frames torch's files really have), sampler passes with chosen
// CPU figures, and hand-made views with stack shares for the rules' edge tests.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/attach_view.hpp"
#include "dldoctor_core/analyze/rules.hpp"
#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/sample/snapshot.hpp"

namespace dldoctor::analyze::attach_sim {

inline constexpr int64_t kS = 1'000'000'000;
inline constexpr int64_t kT0 = 1000 * kS;
// Pids no process has (above any pid_max): the session reads no affinity or limit of them.
inline constexpr int kMain = 4'190'000;
inline constexpr int kWorker0 = kMain + 1;

inline watchdog::PyFrame fr(const std::string& function, const std::string& file, int line = 1) {
  watchdog::PyFrame f;
  f.function = function;
  f.file = file;
  f.line = line;
  return f;
}

inline const std::string kTorch = "/py/site-packages/torch/utils/data/";

/// Frames from the top (most recent call) down, with the worker loop under them.
inline std::vector<watchdog::PyFrame> worker(std::vector<watchdog::PyFrame> top) {
  top.push_back(fr("_worker_loop", kTorch + "_utils/worker.py", 349));
  top.push_back(fr("run", "/py/lib/python3.11/multiprocessing/process.py", 108));
  return top;
}
inline std::vector<watchdog::PyFrame> getitem_stack() {
  return worker({fr("decode_and_resize", "/job/ds.py", 35), fr("__getitem__", "/job/ds.py", 48),
                 fr("<listcomp>", kTorch + "_utils/fetch.py", 54),
                 fr("fetch", kTorch + "_utils/fetch.py", 54)});
}
inline std::vector<watchdog::PyFrame> reading_stack() {
  return worker({fr("readinto", "/py/lib/python3.11/socket.py", 706),
                 fr("__getitem__", "/job/ds.py", 30),
                 fr("<listcomp>", kTorch + "_utils/fetch.py", 54),
                 fr("fetch", kTorch + "_utils/fetch.py", 54)});
}
inline std::vector<watchdog::PyFrame> collate_stack() {
  return worker({fr("collate", kTorch + "_utils/collate.py", 150),
                 fr("default_collate", kTorch + "_utils/collate.py", 398),
                 fr("fetch", kTorch + "_utils/fetch.py", 55)});
}
inline std::vector<watchdog::PyFrame> idle_stack() {
  return worker({fr("poll", "/py/lib/python3.11/multiprocessing/connection.py", 257),
                 fr("get", "/py/lib/python3.11/multiprocessing/queues.py", 113)});
}
inline std::vector<watchdog::PyFrame> main_waiting() {
  return {fr("poll", "/py/lib/python3.11/multiprocessing/connection.py", 257),
          fr("get", "/py/lib/python3.11/multiprocessing/queues.py", 113),
          fr("_try_get_data", kTorch + "dataloader.py", 1291),
          fr("_get_data", kTorch + "dataloader.py", 1464),
          fr("_next_data", kTorch + "dataloader.py", 1505),
          fr("__next__", kTorch + "dataloader.py", 725),
          fr("train", "/job/train.py", 60)};
}
inline std::vector<watchdog::PyFrame> main_stepping() {
  return {fr("forward", "/job/model.py", 12), fr("train", "/job/train.py", 62)};
}
inline std::vector<watchdog::PyFrame> main_in_collective() {
  return {fr("all_reduce", "/py/site-packages/torch/distributed/distributed_c10d.py", 2800),
          fr("train", "/job/train.py", 63)};
}

/// One thread's samples: each stack with its count.
inline ThreadSamples thread(std::vector<std::pair<std::vector<watchdog::PyFrame>, int64_t>> stacks,
                            std::string name = "MainThread") {
  ThreadSamples t;
  t.name = std::move(name);
  for (auto& [frames, n] : stacks) {
    SampledStack s;
    s.frames = frames;
    for (const watchdog::PyFrame& f : frames) s.names.push_back(f.function);
    s.count = n;
    t.stacks.push_back(std::move(s));
  }
  return t;
}

/// One loader with `workers` workers, pids kMain and kWorker0 + i.
inline AttachedLoader loader(int workers = 1) {
  AttachedLoader a;
  a.loader = 0;
  a.main_pid = kMain;
  a.num_workers = workers;
  for (int i = 0; i < workers; ++i) a.worker_pids.push_back(kWorker0 + i);
  a.start_method = trace::StartMethod::kFork;
  return a;
}

inline system::Facts cpus(double usable) {
  system::Facts f;
  f.cpu.usable = usable;
  f.cpu.affinity = int(usable);
  return f;
}

/// Sampler passes every 100 ms for `seconds`: the main process and each worker at a CPU %.
inline void passes(AttachSession& s, const AttachedLoader& a, double seconds, double main_cpu,
                   double worker_cpu, std::optional<double> runq = 2.0) {
  for (int64_t t = kT0; t < kT0 + int64_t(seconds * kS); t += kS / 10) {
    sample::Snapshot snap;
    snap.t_ns = t;
    auto proc = [&](int pid, double cpu) {
      sample::ProcessSample p;
      p.pid = pid;
      p.state = cpu > 50 ? 'R' : 'S';
      p.num_threads = 2;
      p.cpu_pct = cpu;
      p.runq_delay_pct = runq;
      p.cpu_ns_total = int64_t(cpu / 100 * double(t - kT0));
      snap.processes.push_back(p);
    };
    proc(a.main_pid, main_cpu);
    for (int pid : a.worker_pids) proc(pid, worker_cpu);
    s.ingest(snap);
  }
  s.set_window(kT0, kT0 + int64_t(seconds * kS));
}

/// A loader view with stack shares only (no batch timed), for the rules' edge tests.
inline LoaderView stacked(double stall, double idle, double getitem, double collate = 0,
                          double reading = 0, double worker_cpu_pct = 95, int64_t samples = 200,
                          int workers = 1) {
  LoaderView l;
  l.loader = 0;
  l.config.num_workers = workers;
  l.config.main_pid = kMain;
  for (int i = 0; i < workers; ++i) l.worker_pids.push_back(kWorker0 + i);
  StackShares st;
  st.window_s = 10;
  st.main_samples = samples;
  st.main_in_loader = stall;
  st.fetch_samples = samples * workers;
  st.getitem = getitem;
  st.collate = collate;
  st.reading = reading;
  st.idle = idle;
  st.other = std::max(0.0, 1 - idle - getitem - collate - reading);
  l.stacks = st;
  l.data_stall_fraction = stall;
  l.loop_s = 10;
  const double in_fetch = getitem + collate + reading;
  if (in_fetch > 0) l.collate_share = collate / in_fetch;
  l.fetchers.processes = workers;
  l.fetchers.cpu_pct = worker_cpu_pct;
  l.fetchers.runq_delay_pct = 2.0;
  if (in_fetch >= 0.05) l.on_cpu_fraction = std::min(1.0, worker_cpu_pct / 100 / in_fetch);
  return l;
}

inline JobView job_of(LoaderView l, double usable = 2) {
  JobView v;
  v.whole_run = true;
  v.facts = cpus(usable);
  v.total_workers = l.config.num_workers;
  v.all_workers = l.fetchers;
  v.loaders.push_back(std::move(l));
  return v;
}

}  // namespace dldoctor::analyze::attach_sim
