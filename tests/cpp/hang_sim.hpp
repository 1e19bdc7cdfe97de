// Recorded hang captures for the hang rules' tests and the watchdog's: faulthandler text
// recorded from real torch DataLoader workers (Python 3.11, torch 2.x, fork) and the kernel
// state such workers show, as HangSnapshots with the context the Monitor would give.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "analyze_sim.hpp"
#include "dldoctor_core/analyze/rules.hpp"
#include "dldoctor_core/watchdog/hang.hpp"
#include "dldoctor_core/watchdog/stack.hpp"

namespace dldoctor::analyze::hang_sim {

namespace wd = dldoctor::watchdog;
using report::Finding;
using report::Severity;

// Recorded: the main process of a fork DataLoader (2 workers) whose background thread
// "holder" held the lock collate_fn takes; the main thread waits in __next__.
inline constexpr const char* kMainWaiting = R"(Thread 0x00007fab0153c6c0 (most recent call first):
  File "/tmp/wd_rec/rec.py", line 30 in dump
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 982 in run
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1045 in _bootstrap_inner
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1002 in _bootstrap

Thread 0x00007fab01d3d6c0 (most recent call first):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 327 in wait
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/queues.py", line 231 in _feed
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 982 in run
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1045 in _bootstrap_inner
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1002 in _bootstrap

Thread 0x00007fab05dff6c0 (most recent call first):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 327 in wait
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/queues.py", line 231 in _feed
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 982 in run
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1045 in _bootstrap_inner
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1002 in _bootstrap

Thread 0x00007fab0253e6c0 (most recent call first):
  File "/tmp/wd_rec/rec.py", line 19 in holder
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 982 in run
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1045 in _bootstrap_inner
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007fab24605b80 (most recent call first):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/selectors.py", line 415 in select
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", line 947 in wait
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", line 440 in _poll
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", line 257 in poll
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/queues.py", line 113 in get
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1291 in _try_get_data
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1464 in _get_data
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1505 in _next_data
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 725 in __next__
  File "/tmp/wd_rec/rec.py", line 34 in <module>
)";

// Recorded: a forked worker blocked in `with lock:` inside collate_fn my_collate.
inline constexpr const char* kWorkerInCollate =
    R"(Current thread 0x00007fab24605b80 (most recent call first):
  File "/tmp/wd_rec/rec.py", line 14 in my_collate
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", line 57 in fetch
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 374 in _worker_loop
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/process.py", line 108 in run
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/process.py", line 314 in _bootstrap
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/popen_fork.py", line 71 in _launch
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/popen_fork.py", line 19 in __init__
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/context.py", line 281 in _Popen
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/process.py", line 121 in start
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1176 in __init__
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 438 in _get_iterator
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 505 in __iter__
  File "/tmp/wd_rec/rec.py", line 24 in <module>
)";

// Recorded: a worker waiting for its next index (idle), with its feeder and resource
// sharer threads.
inline constexpr const char* kWorkerIdle = R"(Thread 0x00007f953a53e6c0 (most recent call first):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/socket.py", line 294 in accept
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", line 625 in accept
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", line 479 in accept
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/resource_sharer.py", line 138 in _serve
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 982 in run
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1045 in _bootstrap_inner
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1002 in _bootstrap

Thread 0x00007f953ddff6c0 (most recent call first):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 327 in wait
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/queues.py", line 231 in _feed
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 982 in run
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1045 in _bootstrap_inner
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 1002 in _bootstrap

Current thread 0x00007f955c61db80 (most recent call first):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/selectors.py", line 415 in select
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", line 947 in wait
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", line 440 in _poll
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/connection.py", line 257 in poll
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/queues.py", line 113 in get
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 334 in _worker_loop
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/process.py", line 108 in run
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/process.py", line 314 in _bootstrap
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/popen_fork.py", line 71 in _launch
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/popen_fork.py", line 19 in __init__
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/context.py", line 281 in _Popen
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/process.py", line 121 in start
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 1176 in __init__
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 438 in _get_iterator
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/dataloader.py", line 505 in __iter__
  File "/tmp/wd_rec/rec.py", line 24 in <module>
)";

// Recorded: a worker in the dataset's __getitem__ waiting on threading.Event().wait().
inline constexpr const char* kWorkerInGetitem =
    R"(Current thread 0x00007f955c61db80 (most recent call first):
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 327 in wait
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/threading.py", line 629 in wait
  File "/tmp/wd_rec/rec.py", line 11 in __getitem__
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", line 54 in <listcomp>
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/_utils/fetch.py", line 54 in fetch
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 374 in _worker_loop
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/process.py", line 108 in run
  File "/root/.pyenv/versions/3.11.7/lib/python3.11/multiprocessing/process.py", line 314 in _bootstrap
  File "/tmp/wd_rec/rec.py", line 24 in <module>
)";

// The training loop stuck outside the loader (a step waiting on a lock).
inline constexpr const char* kMainInStep =
    R"(Current thread 0x00007f955c61db80 (most recent call first):
  File "/home/u/train.py", line 41 in sync_step
  File "/home/u/train.py", line 57 in train
  File "/home/u/train.py", line 80 in <module>
)";

inline constexpr double kMinute = 60;

inline wd::ProcessCapture process(int pid, int loader, int worker, const char* stack,
                                  std::string state = "S", std::string syscall = "futex",
                                  double cpu_share = 0.0) {
  wd::ProcessCapture p;
  p.pid = pid;
  p.loader = loader;
  p.worker = worker;
  p.state = std::move(state);
  p.syscall = std::move(syscall);
  p.wchan = p.syscall == "futex" ? "futex_wait_queue" : "";
  p.cpu_window_s = kMinute;
  p.cpu_ns_since_stall = int64_t(cpu_share * kMinute * 1e9);
  if (stack != nullptr) {
    p.raw_stack = stack;
    p.stacks = wd::parse_faulthandler(stack);
  }
  return p;
}

inline wd::HangSnapshot snapshot(std::vector<wd::ProcessCapture> processes) {
  wd::HangSnapshot s;
  s.t_ns = 1;
  s.stalled_s = 75;
  s.timeout_s = kMinute;
  s.processes = std::move(processes);
  return s;
}

inline wd::HangContext context(std::string start_method, std::optional<int> threads_at_fork = {}) {
  wd::LoaderContext l;
  l.loader = 0;
  l.num_workers = 2;
  l.collate_fn = "__main__.my_collate";
  l.start_method = std::move(start_method);
  l.main_threads_at_fork = threads_at_fork;
  if (threads_at_fork) l.main_thread_names_at_fork = {"MainThread", "holder"};
  l.waiting_batch = 1;
  l.waiting_worker = 1;
  l.outstanding = {{1, {1, 3}}};
  wd::HangContext c;
  c.loaders.push_back(l);
  return c;
}

inline std::optional<double> number(const Finding& f, const std::string& name) {
  return sim::num(f, name);
}

inline int count_critical(const std::vector<Finding>& fs) {
  int n = 0;
  for (const Finding& f : fs) n += f.severity == Severity::kCritical;
  return n;
}

}  // namespace dldoctor::analyze::hang_sim
