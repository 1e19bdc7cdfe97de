// The hang doctor on recorded captures: faulthandler text recorded from real torch DataLoader
// workers (Python 3.11, torch 2.x, fork) and the kernel state such workers show, fed to the
// parser and the rules; plus the watchdog's timeout and once-per-stall logic.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/watchdog/classify.hpp"
#include "dldoctor_core/watchdog/proc_probe.hpp"
#include "dldoctor_core/watchdog/process_reading.hpp"
#include "dldoctor_core/watchdog/stack.hpp"
#include "dldoctor_core/watchdog/syscall_name.hpp"
#include "dldoctor_core/watchdog/watchdog.hpp"

namespace wd = dldoctor::watchdog;
using dldoctor::report::Finding;
using dldoctor::report::Severity;

namespace {

// Recorded: the main process of a fork DataLoader (2 workers) whose background thread
// "holder" held the lock collate_fn takes; the main thread waits in __next__.
constexpr const char* kMainWaiting = R"(Thread 0x00007fab0153c6c0 (most recent call first):
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
constexpr const char* kWorkerInCollate = R"(Current thread 0x00007fab24605b80 (most recent call first):
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
constexpr const char* kWorkerIdle = R"(Thread 0x00007f953a53e6c0 (most recent call first):
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
constexpr const char* kWorkerInGetitem = R"(Current thread 0x00007f955c61db80 (most recent call first):
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
constexpr const char* kMainInStep = R"(Current thread 0x00007f955c61db80 (most recent call first):
  File "/home/u/train.py", line 41 in sync_step
  File "/home/u/train.py", line 57 in train
  File "/home/u/train.py", line 80 in <module>
)";

constexpr double kMinute = 60;

wd::ProcessCapture process(int pid, int loader, int worker, const char* stack,
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

wd::HangSnapshot snapshot(std::vector<wd::ProcessCapture> processes) {
  wd::HangSnapshot s;
  s.t_ns = 1;
  s.stalled_s = 75;
  s.timeout_s = kMinute;
  s.processes = std::move(processes);
  return s;
}

wd::HangContext context(std::string start_method, std::optional<int> threads_at_fork = {}) {
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

const Finding* find(const std::vector<Finding>& fs, const std::string& id) {
  for (const Finding& f : fs) {
    if (f.id == id) return &f;
  }
  return nullptr;
}

std::optional<std::string> text(const Finding& f, const std::string& name) {
  for (const auto& e : f.evidence) {
    if (e.name == name) {
      if (auto* s = std::get_if<std::string>(&e.value)) return *s;
    }
  }
  return std::nullopt;
}

std::optional<double> number(const Finding& f, const std::string& name) {
  for (const auto& e : f.evidence) {
    if (e.name == name) {
      if (auto* d = std::get_if<double>(&e.value)) return *d;
    }
  }
  return std::nullopt;
}

int count_critical(const std::vector<Finding>& fs) {
  int n = 0;
  for (const Finding& f : fs) n += f.severity == Severity::kCritical;
  return n;
}

}  // namespace

// ---- faulthandler parser -----------------------------------------------------------------

TEST(WatchdogStackParse, SeveralThreadsAndCurrent) {
  auto threads = wd::parse_faulthandler(kMainWaiting);
  ASSERT_EQ(threads.size(), 5u);
  EXPECT_EQ(threads[0].thread_id, "0x00007fab0153c6c0");
  EXPECT_FALSE(threads[0].current);
  ASSERT_EQ(threads[0].frames.size(), 4u);
  EXPECT_EQ(threads[0].frames[0].file, "/tmp/wd_rec/rec.py");
  EXPECT_EQ(threads[0].frames[0].line, 30);
  EXPECT_EQ(threads[0].frames[0].function, "dump");
  EXPECT_TRUE(threads[4].current);
  EXPECT_EQ(threads[4].thread_id, "0x00007fab24605b80");
  ASSERT_EQ(threads[4].frames.size(), 10u);
  EXPECT_EQ(threads[4].frames[5].function, "_try_get_data");
  EXPECT_EQ(threads[4].frames[9].function, "<module>");
  for (const auto& t : threads) {
    EXPECT_FALSE(t.truncated);
    EXPECT_FALSE(t.elided);
  }
}

TEST(WatchdogStackParse, TruncatedMidLineAndAfterHeader) {
  std::string full = kWorkerInCollate;
  // Cut in the middle of the third frame line.
  size_t cut = full.find("worker.py") - 10;
  auto threads = wd::parse_faulthandler(full.substr(0, cut));
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_TRUE(threads[0].truncated);
  ASSERT_EQ(threads[0].frames.size(), 2u);
  EXPECT_EQ(threads[0].frames[1].function, "fetch");

  // Cut right after a header line: a thread with no frames yet.
  std::string two = std::string(kWorkerInCollate) + "\nThread 0x00007fab0253e6c0 (most recent call first):\n";
  threads = wd::parse_faulthandler(two);
  ASSERT_EQ(threads.size(), 2u);
  EXPECT_FALSE(threads[0].truncated);
  EXPECT_TRUE(threads[1].truncated);
  EXPECT_TRUE(threads[1].frames.empty());

  EXPECT_TRUE(wd::parse_faulthandler("").empty());
  EXPECT_TRUE(wd::parse_faulthandler("Current thr").empty());
}

TEST(WatchdogStackParse, NoPythonFrameElisionAndOddLines) {
  const char* text =
      "Thread 0x00007f0000000001 (most recent call first):\n"
      "  <no Python frame>\n"
      "\n"
      "Thread 0x00007f0000000002 (most recent call first):\n"
      "  File \"/a/b.py\", line 3 in f\n"
      "  ...\n"
      "\n"
      "Current thread 0x00007f0000000003 (most recent call first):\n"
      "  Garbage-collecting\n"
      "  File ???, line ??? in ???\n"
      "  File \"/weird, line 9 in x.py\", line 12 in g\n"
      "\n"
      "Current thread's C stack trace (most recent call first):\n"
      "  Binary file \"/usr/bin/python3\", at _Py_DumpStack+0x4c [0x55d]\n"
      "...\n";
  auto threads = wd::parse_faulthandler(text);
  ASSERT_EQ(threads.size(), 3u);
  EXPECT_TRUE(threads[0].no_python_frame);
  EXPECT_TRUE(threads[0].frames.empty());
  EXPECT_FALSE(threads[0].truncated);
  EXPECT_TRUE(threads[1].elided);
  ASSERT_EQ(threads[1].frames.size(), 1u);
  EXPECT_TRUE(threads[2].current);
  ASSERT_EQ(threads[2].frames.size(), 2u);  // the C stack lines are not Python frames
  EXPECT_EQ(threads[2].frames[0].file, "");
  EXPECT_FALSE(threads[2].frames[0].line.has_value());
  EXPECT_EQ(threads[2].frames[0].function, "");
  EXPECT_EQ(threads[2].frames[1].file, "/weird, line 9 in x.py");
  EXPECT_EQ(threads[2].frames[1].line, 12);
  EXPECT_EQ(wd::format_frame(threads[2].frames[1]), "/weird, line 9 in x.py:12 in g");
}

TEST(WatchdogStackParse, SingleThreadStackHeader) {
  auto threads = wd::parse_faulthandler(
      "Stack (most recent call first):\n  File \"/x.py\", line 1 in <module>\n");
  ASSERT_EQ(threads.size(), 1u);
  EXPECT_EQ(threads[0].thread_id, "");
  ASSERT_EQ(threads[0].frames.size(), 1u);
}

// ---- /proc probe ------------------------------------------------------------------------------

TEST(WatchdogProbe, SyscallNamesPerArch) {
  EXPECT_EQ(wd::syscall_name(202, wd::Arch::kX86_64), "futex");
  EXPECT_EQ(wd::syscall_name(98, wd::Arch::kAarch64), "futex");
  EXPECT_EQ(wd::syscall_name(0, wd::Arch::kX86_64), "read");
  EXPECT_EQ(wd::syscall_name(63, wd::Arch::kAarch64), "read");
  EXPECT_EQ(wd::syscall_name(232, wd::Arch::kX86_64), "epoll_wait");
  EXPECT_EQ(wd::syscall_name(22, wd::Arch::kAarch64), "epoll_pwait");
  EXPECT_EQ(wd::syscall_name(61, wd::Arch::kX86_64), "wait4");
  EXPECT_EQ(wd::syscall_name(260, wd::Arch::kAarch64), "wait4");
  EXPECT_EQ(wd::syscall_name(99999, wd::Arch::kX86_64), "syscall_99999");
}

TEST(WatchdogProbe, ParsesSyscallFile) {
  wd::ProcessProbe p;
  wd::parse_proc_syscall(
      "202 0x7f1c 0x80 0x0 0x0 0x0 0x0 0x7ffd4a 0x7f1c2a\n", p);
  EXPECT_EQ(p.syscall_nr, wd::native_arch() == wd::Arch::kX86_64 ? 202 : 202);
  ASSERT_EQ(p.syscall_args.size(), 6u);
  EXPECT_EQ(p.syscall_args[1], 0x80u);
  wd::ProcessProbe r;
  wd::parse_proc_syscall("running\n", r);
  EXPECT_EQ(r.syscall, "running");
  EXPECT_FALSE(r.syscall_nr.has_value());
  wd::ProcessProbe n;
  wd::parse_proc_syscall("-1 0x7ffd4a 0x7f1c2a\n", n);
  EXPECT_EQ(n.syscall, "none");
  wd::ProcessProbe u;
  wd::parse_proc_syscall("", u);
  EXPECT_EQ(u.syscall, "");  // unknown, not a number
}

TEST(WatchdogProbe, ParsesStatWithOddCommAndZombieStatus) {
  // comm with a space and a ')' inside; zombie killed by SIGKILL (status 9 in field 52).
  std::string fields;
  for (int k = 4; k <= 51; ++k) fields += (k == 14 ? " 150" : k == 15 ? " 50" : k == 20 ? " 3" : " 0");
  std::string stat = "42 (py ) worker) Z" + fields + " 9\n";
  wd::ProcessProbe p;
  ASSERT_TRUE(wd::parse_proc_stat(stat, p));
  EXPECT_EQ(p.comm, "py ) worker");
  EXPECT_EQ(p.state, "Z");
  ASSERT_TRUE(p.cpu_ns.has_value());
  EXPECT_EQ(*p.cpu_ns, 200 * (1'000'000'000 / sysconf(_SC_CLK_TCK)));
  EXPECT_EQ(p.num_threads, 3);
  EXPECT_EQ(p.exit_signal, 9);
  EXPECT_FALSE(p.exit_code.has_value());

  std::string exited = "42 (w) Z" + fields + " 768\n";  // exit(3) -> 3 << 8
  wd::ProcessProbe q;
  ASSERT_TRUE(wd::parse_proc_stat(exited, q));
  EXPECT_EQ(q.exit_code, 3);
  EXPECT_FALSE(q.exit_signal.has_value());

  wd::ProcessProbe bad;
  EXPECT_FALSE(wd::parse_proc_stat("garbage", bad));
}

TEST(WatchdogProbe, LiveSelfAndGonePid) {
  wd::ProcessProbe self = wd::probe_process(getpid());
  EXPECT_FALSE(self.gone);
  EXPECT_FALSE(self.state.empty());
  EXPECT_TRUE(self.cpu_ns.has_value());
  EXPECT_FALSE(self.threads.empty());
  EXPECT_TRUE(self.caught_signals.has_value());

  pid_t child = fork();
  if (child == 0) _exit(0);
  int status = 0;
  waitpid(child, &status, 0);
  wd::ProcessProbe gone = wd::probe_process(child);
  EXPECT_EQ(wd::process_state(child), "gone");
  EXPECT_FALSE(wd::process_state(getpid()).empty());
  EXPECT_TRUE(gone.gone);
  EXPECT_EQ(gone.state, "gone");
  EXPECT_FALSE(gone.cpu_ns.has_value());  // unknown, never 0
}

TEST(WatchdogProbe, ZombieShowsExitStatus) {
  pid_t child = fork();
  if (child == 0) _exit(7);
  // Not reaped yet: a zombie whose /proc/<pid>/stat carries its exit status.
  wd::ProcessProbe z;
  for (int i = 0; i < 200; ++i) {
    z = wd::probe_process(child, false);
    if (z.state == "Z") break;
    usleep(5000);
  }
  EXPECT_EQ(z.state, "Z");
  EXPECT_EQ(wd::process_state(child), "Z");
  EXPECT_EQ(z.exit_code, 7);
  int status = 0;
  waitpid(child, &status, 0);
}

TEST(WatchdogProbe, DescribesWaitFunctions) {
  EXPECT_NE(wd::describe_wchan("rpc_wait_bit_killable").find("NFS"), std::string::npos);
  EXPECT_NE(wd::describe_wchan("io_schedule").find("block storage"), std::string::npos);
  EXPECT_NE(wd::describe_wchan("fuse_wait_answer").find("FUSE"), std::string::npos);
  EXPECT_EQ(wd::describe_wchan("futex_wait_queue"), "");
  EXPECT_EQ(wd::describe_wchan(""), "");
}

// ---- rules on recorded captures ------------------------------------------------------------

TEST(WatchdogRules, CollateLockAfterForkWithThreads) {
  auto snap = snapshot({process(100, -1, -1, kMainWaiting, "S", "poll", 0.001),
                        process(101, 0, 0, kWorkerIdle, "S", "poll"),
                        process(102, 0, 1, kWorkerInCollate)});
  auto findings = wd::classify_hang(snap, context("fork", 5));
  ASSERT_FALSE(findings.empty());
  const Finding& f = findings.front();
  EXPECT_EQ(f.id, "collate_deadlock");
  EXPECT_EQ(f.severity, Severity::kCritical);
  EXPECT_EQ(f.loader, 0);
  EXPECT_EQ(number(f, "worker"), 1);
  EXPECT_EQ(number(f, "pid"), 102);
  EXPECT_EQ(number(f, "stalled_s"), 75);
  EXPECT_EQ(text(f, "frame"), "/tmp/wd_rec/rec.py:14 in my_collate");
  EXPECT_EQ(text(f, "syscall"), "futex");
  EXPECT_EQ(text(f, "held_batches"), "1, 3");
  EXPECT_EQ(number(f, "main_threads_at_fork"), 5);
  EXPECT_EQ(text(f, "main_thread_names_at_fork"), "MainThread, holder");
  EXPECT_NE(f.fix.find("multiprocessing_context='spawn'"), std::string::npos);
  EXPECT_NE(f.why.find("copied into the worker locked"), std::string::npos);
  EXPECT_NE(f.title.find("my_collate"), std::string::npos);
  // One stuck worker, one finding: not also a worker_hang, and the idle worker is no suspect.
  EXPECT_EQ(count_critical(findings), 1);
  EXPECT_FALSE(text(f, "stuck_workers").has_value());
}

TEST(WatchdogRules, CollateLockUnderSpawnHasNoForkFact) {
  auto snap = snapshot({process(100, -1, -1, kMainWaiting, "S", "poll"),
                        process(102, 0, 1, kWorkerInCollate)});
  auto findings = wd::classify_hang(snap, context("spawn"));
  const Finding* f = find(findings, "collate_deadlock");
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(number(*f, "main_threads_at_fork").has_value());
  EXPECT_EQ(f->fix.find("multiprocessing_context"), std::string::npos);
  EXPECT_EQ(text(*f, "start_method"), "spawn");
  // fork with a single-threaded main process: no fork fact either.
  auto single = wd::classify_hang(snap, context("fork", 1));
  ASSERT_NE(find(single, "collate_deadlock"), nullptr);
  EXPECT_FALSE(number(*find(single, "collate_deadlock"), "main_threads_at_fork").has_value());
}

TEST(WatchdogRules, CollateCpuShareEdge) {
  // The same stack on a lock line (a spin on lock.acquire(timeout=...) looks like this): just
  // under the busy threshold it is deadlocked; just over, a busy worker, not a deadlock.
  auto at_lock = [](double share) {
    auto p = process(102, 0, 1, kWorkerInCollate, "S", "futex", share);
    p.stacks[0].frames[0].code = "with lock:";
    return p;
  };
  auto under = wd::classify_hang(snapshot({at_lock(wd::kBusyCpuShare * 0.98)}), context("fork", 2));
  ASSERT_NE(find(under, "collate_deadlock"), nullptr);
  EXPECT_EQ(text(*find(under, "collate_deadlock"), "wait"), "lock");
  auto over = wd::classify_hang(snapshot({at_lock(wd::kBusyCpuShare * 1.02)}), context("fork", 2));
  EXPECT_EQ(find(over, "collate_deadlock"), nullptr);
  const Finding* hang = find(over, "worker_hang");
  ASSERT_NE(hang, nullptr);
  EXPECT_EQ(text(*hang, "stage"), "collate");
  EXPECT_EQ(number(*hang, "busy"), 1.0);
}

TEST(WatchdogRules, DefaultCollateBlockedInFutexWithoutSourceLines) {
  // torch's default_collate blocked in a C-level wait: no Python sync frame on top, but the
  // kernel shows the futex.
  const char* stack =
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/site-packages/torch/utils/data/_utils/collate.py\", line 141 in collate\n"
      "  File \"/site-packages/torch/utils/data/_utils/collate.py\", line 398 in default_collate\n"
      "  File \"/site-packages/torch/utils/data/_utils/fetch.py\", line 57 in fetch\n"
      "  File \"/site-packages/torch/utils/data/_utils/worker.py\", line 374 in _worker_loop\n";
  auto ctx = context("spawn");
  ctx.loaders[0].collate_fn = "";
  auto findings = wd::classify_hang(snapshot({process(102, 0, 1, stack)}), ctx);
  const Finding* f = find(findings, "collate_deadlock");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(text(*f, "wait"), "futex");
  EXPECT_EQ(text(*f, "collate_fn"), "default_collate");
  // The same stack in a process that is not in a futex (sleeping) is a hang, not a deadlock.
  auto sleeping = process(102, 0, 1, stack, "S", "clock_nanosleep");
  auto other = wd::classify_hang(snapshot({sleeping}), ctx);
  EXPECT_EQ(find(other, "collate_deadlock"), nullptr);
  ASSERT_NE(find(other, "worker_hang"), nullptr);
  EXPECT_EQ(text(*find(other, "worker_hang"), "stage"), "collate");
}

TEST(WatchdogRules, SourceLineDecidesCollateVersusGetitem) {
  // A callable collate object: its frame is __call__, and fetch's line calls collate_fn.
  std::string stack =
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/u/c.py\", line 9 in __call__\n"
      "  File \"/t/torch/utils/data/_utils/fetch.py\", line 57 in fetch\n"
      "  File \"/t/torch/utils/data/_utils/worker.py\", line 374 in _worker_loop\n";
  auto p = process(102, 0, 1, stack.c_str());
  p.stacks[0].frames[0].code = "with self.lock:";
  p.stacks[0].frames[1].code = "return self.collate_fn(data)";
  auto ctx = context("fork", 3);
  ctx.loaders[0].collate_fn = "pkg.Collator";
  auto findings = wd::classify_hang(snapshot({p}), ctx);
  ASSERT_NE(find(findings, "collate_deadlock"), nullptr);
  EXPECT_EQ(text(*find(findings, "collate_deadlock"), "wait"), "lock");
  // The same frames where fetch's line indexes the dataset: getitem.
  p.stacks[0].frames[1].code = "data = [self.dataset[idx] for idx in possibly_batched_index]";
  findings = wd::classify_hang(snapshot({p}), ctx);
  EXPECT_EQ(find(findings, "collate_deadlock"), nullptr);
  ASSERT_NE(find(findings, "worker_hang"), nullptr);
  EXPECT_EQ(text(*find(findings, "worker_hang"), "stage"), "getitem");
}

TEST(WatchdogRules, GetitemWaitingOnEvent) {
  auto snap = snapshot({process(100, -1, -1, kMainWaiting, "S", "poll"),
                        process(101, 0, 0, kWorkerIdle, "S", "poll"),
                        process(102, 0, 1, kWorkerInGetitem)});
  auto findings = wd::classify_hang(snap, context("fork", 2));
  EXPECT_EQ(find(findings, "collate_deadlock"), nullptr);
  ASSERT_EQ(count_critical(findings), 1);
  const Finding& f = findings.front();
  EXPECT_EQ(f.id, "worker_hang");
  EXPECT_EQ(text(f, "stage"), "getitem");
  EXPECT_EQ(number(f, "worker"), 1);
  EXPECT_EQ(text(f, "frame"), "/tmp/wd_rec/rec.py:11 in __getitem__");
  EXPECT_EQ(text(f, "wait"), "condition");
  EXPECT_NE(f.fix.find("DataLoader(timeout="), std::string::npos);
  EXPECT_FALSE(text(f, "stuck_workers").has_value());  // the idle worker is not a suspect
}

TEST(WatchdogRules, PrimaryIsTheWorkerTheMainProcessWaitsFor) {
  auto snap = snapshot({process(101, 0, 0, kWorkerInGetitem), process(102, 0, 1, kWorkerInGetitem)});
  auto findings = wd::classify_hang(snap, context("fork", 2));  // waits for worker 1
  const Finding* f = find(findings, "worker_hang");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(number(*f, "worker"), 1);
  EXPECT_EQ(text(*f, "stuck_workers"), "0 (pid 101), 1 (pid 102)");
}

TEST(WatchdogRules, DStateWorkerIsIo) {
  const char* stack =
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/u/ds.py\", line 20 in __getitem__\n"
      "  File \"/t/torch/utils/data/_utils/fetch.py\", line 54 in <listcomp>\n"
      "  File \"/t/torch/utils/data/_utils/fetch.py\", line 54 in fetch\n"
      "  File \"/t/torch/utils/data/_utils/worker.py\", line 374 in _worker_loop\n";
  auto p = process(102, 0, 1, stack, "D", "read");
  p.wchan = "rpc_wait_bit_killable";
  p.io_target = "/mnt/nfs/img_000123.jpg (an NFS server (network file system))";
  auto findings = wd::classify_hang(snapshot({p}), context("fork", 2));
  const Finding* f = find(findings, "worker_hang");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(text(*f, "stage"), "io");
  EXPECT_EQ(text(*f, "where"), "getitem");
  EXPECT_EQ(text(*f, "io_target"), p.io_target);
  EXPECT_NE(f->title.find("/mnt/nfs/img_000123.jpg"), std::string::npos);
  EXPECT_NE(f->fix.find("NFS"), std::string::npos);
  // D state with no stack at all (the signal waits until the read returns): still io.
  auto bare = process(102, 0, 1, nullptr, "D", "read");
  bare.stack_note = "no stack within 500 ms";
  auto f2 = wd::classify_hang(snapshot({bare}), context("fork", 2));
  ASSERT_NE(find(f2, "worker_hang"), nullptr);
  EXPECT_EQ(text(*find(f2, "worker_hang"), "stage"), "io");
}

TEST(WatchdogRules, WorkerInitStage) {
  const char* stack =
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 327 in wait\n"
      "  File \"/u/train.py\", line 12 in init_worker\n"
      "  File \"/t/torch/utils/data/_utils/worker.py\", line 290 in _worker_loop\n";
  auto ctx = context("fork", 2);
  ctx.loaders[0].worker_init_fn = "__main__.init_worker";
  auto findings = wd::classify_hang(snapshot({process(102, 0, 1, stack)}), ctx);
  const Finding* f = find(findings, "worker_hang");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(text(*f, "stage"), "worker_init");
  EXPECT_EQ(text(*f, "frame"), "/u/train.py:12 in init_worker");
}

TEST(WatchdogRules, GoneWorkerDied) {
  wd::ProcessCapture gone;
  gone.pid = 102;
  gone.loader = 0;
  gone.worker = 1;
  gone.gone = true;
  gone.state = "gone";
  gone.exit_signal = 9;
  auto snap = snapshot({process(100, -1, -1, kMainWaiting, "S", "poll"),
                        process(101, 0, 0, kWorkerIdle, "S", "poll"), gone});
  auto findings = wd::classify_hang(snap, context("fork", 2));
  ASSERT_FALSE(findings.empty());
  const Finding& f = findings.front();
  EXPECT_EQ(f.id, "worker_died");
  EXPECT_EQ(f.severity, Severity::kCritical);
  EXPECT_EQ(number(f, "exit_signal"), 9);
  EXPECT_EQ(text(f, "exit_signal_name"), "SIGKILL");
  EXPECT_NE(f.fix.find("OOM"), std::string::npos);
  EXPECT_EQ(find(findings, "worker_hang"), nullptr);  // the main waiting is explained
  // A zombie counts as dead too.
  auto z = process(102, 0, 1, nullptr, "Z", "");
  z.exit_code = 1;
  auto fz = wd::classify_hang(snapshot({z}), context("fork", 2));
  ASSERT_NE(find(fz, "worker_died"), nullptr);
  EXPECT_EQ(number(*find(fz, "worker_died"), "exit_code"), 1);
}

TEST(WatchdogRules, MainOutsideLoaderIsInfoOnly) {
  auto snap = snapshot({process(100, -1, -1, kMainInStep, "S", "futex"),
                        process(101, 0, 0, kWorkerIdle, "S", "poll"),
                        process(102, 0, 1, kWorkerIdle, "S", "poll")});
  auto findings = wd::classify_hang(snap, context("fork", 2));
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].id, "main_process_bound");
  EXPECT_EQ(findings[0].severity, Severity::kInfo);
  EXPECT_EQ(count_critical(findings), 0);
  EXPECT_NE(findings[0].title.find("training loop itself is stuck"), std::string::npos);
  EXPECT_NE(findings[0].title.find("/home/u/train.py:41 in sync_step"), std::string::npos);
  auto top = text(findings[0], "top_frames");
  ASSERT_TRUE(top.has_value());
  EXPECT_NE(top->find("train.py:57 in train"), std::string::npos);
}

TEST(WatchdogRules, MainWaitingWithNoVisibleCauseIsStillAHang) {
  auto snap = snapshot({process(100, -1, -1, kMainWaiting, "S", "poll"),
                        process(101, 0, 0, kWorkerIdle, "S", "poll"),
                        process(102, 0, 1, kWorkerIdle, "S", "poll")});
  auto findings = wd::classify_hang(snap, context("fork", 2));
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].id, "worker_hang");
  EXPECT_EQ(text(findings[0], "stage"), "other");
  EXPECT_EQ(number(findings[0], "worker"), 1);
  EXPECT_EQ(find(findings, "main_process_bound"), nullptr);
}

TEST(WatchdogRules, NoStackNoContextNoVerdict) {
  // Workers without stacks and no knowledge of what they owe: nothing to say.
  auto snap = snapshot({process(101, 0, 0, nullptr, "S", "poll")});
  wd::HangContext empty;
  EXPECT_TRUE(wd::classify_hang(snap, empty).empty());
  // ... but a worker known to owe the awaited batch is reported.
  auto owed = wd::classify_hang(snapshot({process(102, 0, 1, nullptr, "S", "poll")}),
                                context("fork", 2));
  ASSERT_NE(find(owed, "worker_hang"), nullptr);
  EXPECT_EQ(text(*find(owed, "worker_hang"), "stage"), "other");
}

TEST(WatchdogRules, SingleProcessLoaderStuckInGetitem) {
  const char* stack =
      "Current thread 0x1 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 327 in wait\n"
      "  File \"/u/ds.py\", line 8 in __getitem__\n"
      "  File \"/t/torch/utils/data/_utils/fetch.py\", line 54 in <listcomp>\n"
      "  File \"/t/torch/utils/data/_utils/fetch.py\", line 54 in fetch\n"
      "  File \"/t/torch/utils/data/dataloader.py\", line 789 in _next_data\n"
      "  File \"/t/torch/utils/data/dataloader.py\", line 733 in __next__\n"
      "  File \"/u/train.py\", line 5 in <module>\n";
  auto ctx = context("");
  ctx.loaders[0].num_workers = 0;
  auto findings = wd::classify_hang(snapshot({process(100, -1, -1, stack)}), ctx);
  const Finding* f = find(findings, "worker_hang");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->loader, 0);
  EXPECT_EQ(text(*f, "stage"), "getitem");
  EXPECT_EQ(number(*f, "worker"), -1);
  EXPECT_EQ(find(findings, "main_process_bound"), nullptr);
}

// ---- the watchdog -------------------------------------------------------------------------

TEST(WatchdogTimeout, AdaptiveAndOverride) {
  EXPECT_EQ(wd::adaptive_timeout_s(std::nullopt), 60);
  EXPECT_EQ(wd::adaptive_timeout_s(int64_t(3e9)), 60);       // 10 x 3 s < 60 s
  EXPECT_EQ(wd::adaptive_timeout_s(int64_t(6e9)), 60);       // the edge: exactly 60
  EXPECT_DOUBLE_EQ(wd::adaptive_timeout_s(int64_t(6.5e9)), 65);

  wd::Watchdog dog({}, [] { return wd::WatchState{}; });
  EXPECT_EQ(dog.timeout_s(), 60);
  EXPECT_FALSE(dog.p99_inter_batch_ns().has_value());
  for (int s = 1; s <= 100; ++s) dog.note_inter_batch_ns(int64_t(s) * 1'000'000'000);
  EXPECT_EQ(dog.p99_inter_batch_ns(), int64_t(99e9));  // nearest rank of 1..100 s
  EXPECT_DOUBLE_EQ(dog.timeout_s(), 990);
  dog.set_timeout_override(5.0);
  EXPECT_EQ(dog.timeout_s(), 5);
  dog.set_timeout_override(std::nullopt);
  EXPECT_DOUBLE_EQ(dog.timeout_s(), 990);
  EXPECT_THROW(dog.set_timeout_override(0.0), dldoctor::Error);
  // The window keeps the newest gaps: 1024 fast ones push the slow ones out.
  for (size_t i = 0; i < wd::kInterBatchWindow; ++i) dog.note_inter_batch_ns(10'000'000);
  EXPECT_EQ(dog.timeout_s(), 60);
}

TEST(WatchdogCheck, OncePerStallAndRearmsOnBatch) {
  const int64_t t0 = 1'000'000'000'000;
  wd::WatchState state;
  state.loader_active = true;
  state.processes.push_back({getpid(), -1, -1, {}, {}});
  std::vector<double> stalls;
  wd::WatchdogOptions opts;  // run_dir empty: no signals, kernel view only
  opts.min_cpu_window_ns = 0;  // fake clock: do not wait for real CPU time
  wd::Watchdog dog(opts, [&] { return state; },
                   [&](const wd::HangSnapshot& s, const std::vector<Finding>&) {
                     stalls.push_back(s.stalled_s);
                   });
  dog.note_batch(t0);
  EXPECT_FALSE(dog.check(t0 + int64_t(59.9e9)));
  EXPECT_TRUE(dog.check(t0 + int64_t(60e9)));
  EXPECT_FALSE(dog.check(t0 + int64_t(61e9)));  // the same stall is reported once
  ASSERT_EQ(stalls.size(), 1u);
  EXPECT_DOUBLE_EQ(stalls[0], 60);
  auto snap = dog.last_snapshot();
  ASSERT_TRUE(snap.has_value());
  ASSERT_EQ(snap->processes.size(), 1u);
  EXPECT_EQ(snap->processes[0].pid, getpid());
  EXPECT_FALSE(snap->processes[0].state.empty());
  EXPECT_TRUE(snap->processes[0].cpu_ns_since_stall.has_value());

  dog.note_batch(t0 + int64_t(70e9));  // batches flow again: re-armed
  EXPECT_FALSE(dog.check(t0 + int64_t(100e9)));
  EXPECT_TRUE(dog.check(t0 + int64_t(130e9)));
  EXPECT_EQ(dog.hangs(), 2);

  // An inactive loader (no iterator) is never a hang.
  state.loader_active = false;
  EXPECT_FALSE(dog.check(t0 + int64_t(1000e9)));
}

TEST(WatchdogCheck, NoBatchYetCountsFromIteratorStart) {
  const int64_t t0 = 5'000'000'000'000;
  wd::WatchState state;
  state.loader_active = true;
  state.active_since_ns = t0;
  wd::WatchdogOptions opts;
  opts.min_cpu_window_ns = 0;
  wd::Watchdog dog(opts, [&] { return state; });
  dog.set_timeout_override(10.0);
  EXPECT_FALSE(dog.check(t0 + int64_t(9e9)));
  EXPECT_TRUE(dog.check(t0 + int64_t(10e9)));
  // A new iterator (next epoch) is a new stall.
  state.active_since_ns = t0 + int64_t(20e9);
  EXPECT_TRUE(dog.check(t0 + int64_t(30e9)));
}

TEST(WatchdogThread, ReportsWithinTimeoutPlusTwoSeconds) {
  std::mutex mu;
  std::condition_variable cv;
  int64_t reported = 0;
  const int64_t start = dldoctor::now_ns();
  wd::WatchState state;
  state.loader_active = true;
  state.last_batch_ns = start;
  wd::WatchdogOptions opts;
  opts.timeout_override_s = 0.3;
  wd::Watchdog dog(opts, [&] { return state; },
                   [&](const wd::HangSnapshot&, const std::vector<Finding>&) {
                     std::lock_guard lock(mu);
                     reported = dldoctor::now_ns();
                     cv.notify_all();
                   });
  dog.start();
  EXPECT_THROW(dog.start(), dldoctor::Error);
  {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::seconds(5), [&] { return reported != 0; });
  }
  dog.stop();
  dog.stop();  // twice is fine
  ASSERT_NE(reported, 0);
  double after_s = double(reported - start) / 1e9;
  EXPECT_GE(after_s, 0.3);
  EXPECT_LT(after_s, 0.3 + 2.0);
  EXPECT_EQ(dog.hangs(), 1);
  // CPU progress was judged over at least the minimum window.
  auto snap = dog.last_snapshot();
  ASSERT_TRUE(snap.has_value());
}

TEST(WatchdogCheck, LateStallWaitsForACpuWindow) {
  // The stall is already due at the first look: the capture waits for a CPU window so a
  // 10 ms tick cannot read as a busy process.
  const int64_t now = dldoctor::now_ns();
  wd::WatchState state;
  state.loader_active = true;
  state.last_batch_ns = now - int64_t(100e9);
  state.processes.push_back({getpid(), -1, -1, {}, {}});
  wd::WatchdogOptions opts;
  opts.min_cpu_window_ns = 200'000'000;
  wd::Watchdog dog(opts, [&] { return state; });
  ASSERT_TRUE(dog.check(now));
  auto snap = dog.last_snapshot();
  ASSERT_TRUE(snap.has_value());
  EXPECT_GE(snap->processes[0].cpu_window_s, 0.2);
}

TEST(WatchdogCheck, BusyWorkersWithNothingStuckAreSlowNotHung) {
  // A worker still starting (importing torch under spawn) uses CPU and holds no stuck stack:
  // no hang is reported for it, and the watchdog looks again one timeout later.
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    volatile uint64_t x = 0;
    for (;;) x = x + 1;  // busy until killed
  }
  const int64_t t0 = dldoctor::now_ns();
  wd::WatchState state;
  state.loader_active = true;
  state.last_batch_ns = t0;
  state.processes.push_back({child, 1, 0, {}, {}});
  wd::WatchdogOptions opts;
  opts.timeout_override_s = 0.2;
  opts.min_cpu_window_ns = 300'000'000;
  wd::Watchdog dog(opts, [&] { return state; });
  EXPECT_FALSE(dog.check(t0 + int64_t(0.1e9)));  // marks the CPU at the stall's start
  EXPECT_FALSE(dog.check(dldoctor::now_ns() + int64_t(0.5e9)));  // due, but the worker works
  EXPECT_EQ(dog.hangs(), 0);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // Once it is gone, the next look after the deferral reports the stall.
  EXPECT_TRUE(dog.check(dldoctor::now_ns() + int64_t(2e9)));
  EXPECT_EQ(dog.hangs(), 1);
}
