// The hang doctor's capture side: faulthandler text recorded from real torch DataLoader
// workers (hang_sim.hpp) fed to the parser, the /proc probe on real processes, and the
// watchdog's timeout and once-per-stall logic. The hang rules that read a capture are tested
// per finding id in tests/cpp/rules/.
#include "dldoctor_core/watchdog/watchdog.hpp"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "dldoctor_core/analyze/rules.hpp"
#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/common/error.hpp"
#include "dldoctor_core/watchdog/proc_probe.hpp"
#include "dldoctor_core/watchdog/stack.hpp"
#include "dldoctor_core/watchdog/syscall_name.hpp"
#include "hang_sim.hpp"

namespace wd = dldoctor::watchdog;
using dldoctor::report::Finding;
using dldoctor::report::Severity;
using namespace dldoctor::analyze::hang_sim;

namespace {}  // namespace

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
  std::string two =
      std::string(kWorkerInCollate) + "\nThread 0x00007fab0253e6c0 (most recent call first):\n";
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
  wd::parse_proc_syscall("202 0x7f1c 0x80 0x0 0x0 0x0 0x0 0x7ffd4a 0x7f1c2a\n", p);
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
  for (int k = 4; k <= 51; ++k)
    fields += (k == 14 ? " 150" : k == 15 ? " 50" : k == 20 ? " 3" : " 0");
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

// ---- the watchdog -------------------------------------------------------------------------

TEST(WatchdogTimeout, AdaptiveAndOverride) {
  EXPECT_EQ(wd::adaptive_timeout_s(std::nullopt), 60);
  EXPECT_EQ(wd::adaptive_timeout_s(int64_t(3e9)), 60);  // 10 x 3 s < 60 s
  EXPECT_EQ(wd::adaptive_timeout_s(int64_t(6e9)), 60);  // the edge: exactly 60
  EXPECT_DOUBLE_EQ(wd::adaptive_timeout_s(int64_t(6.5e9)), 65);

  wd::Watchdog dog(
      {}, [] { return wd::WatchState{}; }, dldoctor::analyze::judge_hang);
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
  wd::WatchdogOptions opts;    // run_dir empty: no signals, kernel view only
  opts.min_cpu_window_ns = 0;  // fake clock: do not wait for real CPU time
  wd::Watchdog dog(
      opts, [&] { return state; }, dldoctor::analyze::judge_hang,
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
  wd::Watchdog dog(
      opts, [&] { return state; }, dldoctor::analyze::judge_hang);
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
  wd::Watchdog dog(
      opts, [&] { return state; }, dldoctor::analyze::judge_hang,
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
  wd::Watchdog dog(
      opts, [&] { return state; }, dldoctor::analyze::judge_hang);
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
  wd::Watchdog dog(
      opts, [&] { return state; }, dldoctor::analyze::judge_hang);
  EXPECT_FALSE(dog.check(t0 + int64_t(0.1e9)));  // marks the CPU at the stall's start
  EXPECT_FALSE(dog.check(dldoctor::now_ns() + int64_t(0.5e9)));  // due, but the worker works
  EXPECT_EQ(dog.hangs(), 0);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // Once it is gone, the next look after the deferral reports the stall.
  EXPECT_TRUE(dog.check(dldoctor::now_ns() + int64_t(2e9)));
  EXPECT_EQ(dog.hangs(), 1);
}

// ---- the capture's two signals ----------------------------------------------------------

namespace {

// What a child of the capture tests does with each signal: write a dump at once, or nothing
// (a main thread that never reaches a safe point: the Python handler never runs).
enum class Answer { kNone, kWrite, kIgnore };

int g_stack_fd = -1;
constexpr char kSafeDump[] =
    "Current thread 0x01 (most recent call first):\n  File \"a.py\", line 1 in safe\n";
constexpr char kNativeDump[] =
    "Stack (most recent call first):\n  File \"a.py\", line 2 in native\n";

void write_safe(int) { (void)!write(g_stack_fd, kSafeDump, sizeof kSafeDump - 1); }
void write_native(int) { (void)!write(g_stack_fd, kNativeDump, sizeof kNativeDump - 1); }
void ignore(int) {}

void handle(int signal, Answer a, void (*writer)(int)) {
  if (a == Answer::kNone) return;
  struct sigaction sa {};
  sa.sa_handler = a == Answer::kWrite ? writer : ignore;
  sigaction(signal, &sa, nullptr);
}

/// A child with the given answers to the safe-point and the native signal; returns once its
/// handlers are set. `main_blocks`: its main thread blocks both signals and a second thread
/// takes them (a job that masks signals in its main thread).
pid_t answering_child(const std::string& run_dir, Answer safe, Answer native,
                      bool main_blocks = false) {
  int ready[2];
  if (pipe(ready) != 0) return -1;
  pid_t child = fork();
  if (child == 0) {
    close(ready[0]);
    std::string path = wd::stack_file(run_dir, getpid());
    g_stack_fd = open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    const int signal = wd::default_stack_signal();
    handle(signal, safe, write_safe);
    handle(wd::native_stack_signal(signal), native, write_native);
    if (main_blocks) {
      std::thread([] {
        for (;;) pause();
      }).detach();  // created first: its mask keeps both signals open
      sigset_t set;
      sigemptyset(&set);
      sigaddset(&set, signal);
      sigaddset(&set, wd::native_stack_signal(signal));
      pthread_sigmask(SIG_BLOCK, &set, nullptr);
    }
    (void)!write(ready[1], "x", 1);
    for (;;) pause();
  }
  close(ready[1]);
  char c;
  (void)!read(ready[0], &c, 1);
  close(ready[0]);
  return child;
}

}  // namespace

TEST(WatchdogCapture, SafePointFirstNativeOnlyWhenNothingComes) {
  char dir[] = "/tmp/dldoctor_capture_XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string run_dir = dir;
  pid_t at_safe_point = answering_child(run_dir, Answer::kWrite, Answer::kWrite);
  pid_t stuck_in_c = answering_child(run_dir, Answer::kIgnore, Answer::kWrite);
  pid_t native_only = answering_child(run_dir, Answer::kNone, Answer::kWrite);
  pid_t safe_only = answering_child(run_dir, Answer::kIgnore, Answer::kNone);
  pid_t neither = answering_child(run_dir, Answer::kNone, Answer::kNone);
  pid_t main_masked = answering_child(run_dir, Answer::kWrite, Answer::kWrite, true);
  auto got = wd::capture_stacks(
      {at_safe_point, stuck_in_c, native_only, safe_only, neither, main_masked}, run_dir,
      wd::default_stack_signal(), 1000);
  ASSERT_EQ(got.size(), 6u);
  // Answered at once: the native signal is never sent.
  EXPECT_EQ(got[0].text, kSafeDump);
  EXPECT_FALSE(got[0].native);
  EXPECT_EQ(got[0].note, "");
  // No safe point within kSafePointWaitMs: the native dump.
  EXPECT_EQ(got[1].text, kNativeDump);
  EXPECT_TRUE(got[1].native);
  // Only the native handler (registered off the main thread): sent that one straight away.
  EXPECT_EQ(got[2].text, kNativeDump);
  EXPECT_TRUE(got[2].native);
  // Only the safe-point handler, and it never answers: nothing, and never the native signal,
  // whose default action would end the process.
  EXPECT_EQ(got[3].text, "");
  EXPECT_FALSE(got[3].native);
  EXPECT_NE(got[3].note.find("no stack within"), std::string::npos) << got[3].note;
  // No handler at all: not signalled.
  EXPECT_NE(got[4].note.find("no handler"), std::string::npos) << got[4].note;
  // The main thread blocks the signal: sent to the process, another thread takes it.
  EXPECT_EQ(got[5].text, kSafeDump);
  EXPECT_FALSE(got[5].native);
  for (pid_t p : {at_safe_point, stuck_in_c, native_only, safe_only, neither, main_masked}) {
    EXPECT_NE(wd::process_state(p), "gone") << "the capture ended pid " << p;
    kill(p, SIGKILL);
    waitpid(p, nullptr, 0);
  }
  std::string cleanup = "rm -rf " + run_dir;
  (void)!system(cleanup.c_str());
}
