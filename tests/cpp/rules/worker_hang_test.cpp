// worker_hang on recorded captures: stuck in __getitem__, in D-state I/O, in worker_init, the
// worker the main process waits for first, a single-process loader, and the hang nothing
// else explains.
#include "dldoctor_core/analyze/rules/worker_hang.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"
#include "../hang_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;
using namespace hang_sim;

TEST(WatchdogRules, GetitemWaitingOnEvent) {
  auto snap = snapshot({process(100, -1, -1, kMainWaiting, "S", "poll"),
                        process(101, 0, 0, kWorkerIdle, "S", "poll"),
                        process(102, 0, 1, kWorkerInGetitem)});
  auto findings = classify_hang(snap, context("fork", 2));
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
  auto snap =
      snapshot({process(101, 0, 0, kWorkerInGetitem), process(102, 0, 1, kWorkerInGetitem)});
  auto findings = classify_hang(snap, context("fork", 2));  // waits for worker 1
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
  auto findings = classify_hang(snapshot({p}), context("fork", 2));
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
  auto f2 = classify_hang(snapshot({bare}), context("fork", 2));
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
  auto findings = classify_hang(snapshot({process(102, 0, 1, stack)}), ctx);
  const Finding* f = find(findings, "worker_hang");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(text(*f, "stage"), "worker_init");
  EXPECT_EQ(text(*f, "frame"), "/u/train.py:12 in init_worker");
}

TEST(WatchdogRules, MainWaitingWithNoVisibleCauseIsStillAHang) {
  auto snap = snapshot({process(100, -1, -1, kMainWaiting, "S", "poll"),
                        process(101, 0, 0, kWorkerIdle, "S", "poll"),
                        process(102, 0, 1, kWorkerIdle, "S", "poll")});
  auto findings = classify_hang(snap, context("fork", 2));
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
  EXPECT_TRUE(classify_hang(snap, empty).empty());
  // ... but a worker known to owe the awaited batch is reported.
  auto owed =
      classify_hang(snapshot({process(102, 0, 1, nullptr, "S", "poll")}), context("fork", 2));
  ASSERT_NE(find(owed, "worker_hang"), nullptr);
  EXPECT_EQ(text(*find(owed, "worker_hang"), "stage"), "other");
}

TEST(WatchdogRules, BusyWorkerWithoutAStackIsStartingNotStuck) {
  // A spawned worker still importing torch on a loaded machine: no stack handler yet, owes the
  // awaited batch, runnable and making CPU progress (10% of a core over the stall).
  auto starting = process(102, 0, 1, nullptr, "R", "running", 0.10);
  starting.stack_note = "no handler for signal 58 (the hooks are not installed there)";
  EXPECT_EQ(find(classify_hang(snapshot({starting}), context("spawn", 2)), "worker_hang"), nullptr);
  // The same worker using no CPU is stuck.
  auto idle = process(102, 0, 1, nullptr, "S", "poll", 0.0);
  idle.stack_note = starting.stack_note;
  EXPECT_NE(find(classify_hang(snapshot({idle}), context("spawn", 2)), "worker_hang"), nullptr);
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
  auto findings = classify_hang(snapshot({process(100, -1, -1, stack)}), ctx);
  const Finding* f = find(findings, "worker_hang");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->loader, 0);
  EXPECT_EQ(text(*f, "stage"), "getitem");
  EXPECT_EQ(number(*f, "worker"), -1);
  EXPECT_EQ(find(findings, "main_process_bound"), nullptr);
}

// Recorded (collate_deadlock.py --healthy under spawn, 3 busy loops beside it): the iterator
// was dropped while its spawned workers still imported torch, and the main process joins them.
constexpr const char* kMainJoiningWorkers =
    "Current thread 0x00007f81758abb80 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/selectors.py\", line 415 in select\n"
    "  File \"/usr/lib/python3.11/multiprocessing/connection.py\", line 947 in wait\n"
    "  File \"/usr/lib/python3.11/multiprocessing/popen_fork.py\", line 40 in wait\n"
    "  File \"/usr/lib/python3.11/multiprocessing/process.py\", line 149 in join\n"
    "  File \"/t/torch/utils/data/dataloader.py\", line 1654 in _shutdown_workers\n"
    "  File \"/t/torch/utils/data/dataloader.py\", line 1704 in __del__\n"
    "  File \"/u/train.py\", line 72 in consume\n";
// The spawned worker's stack, deeper than faulthandler writes: importing, no spawn frame left.
constexpr const char* kWorkerImporting =
    "Current thread 0x00007fef25bedb80 (most recent call first):\n"
    "  File \"/usr/lib/python3.11/dataclasses.py\", line 433 in _create_fn\n"
    "  File \"/t/torch/utils/_pytree.py\", line 488 in <module>\n"
    "  File \"<frozen importlib._bootstrap>\", line 241 in _call_with_frames_removed\n"
    "  File \"<frozen importlib._bootstrap_external>\", line 940 in exec_module\n"
    "  File \"<frozen importlib._bootstrap>\", line 690 in _load_unlocked\n"
    "  File \"/t/torch/_vmap_internals.py\", line 9 in <module>\n";

TEST(WatchdogRules, MainJoiningStartingWorkersIsSlowNotStuck) {
  auto main = process(100, -1, -1, kMainJoiningWorkers, "S", "poll");
  auto w0 = process(101, 0, 0, kWorkerImporting, "R", "running", 0.09);
  auto w1 = process(102, 0, 1, kWorkerImporting, "R", "running", 0.09);
  // Workers that make progress while the main process waits on them in the loader: nothing.
  EXPECT_TRUE(classify_hang(snapshot({main, w0, w1}), context("spawn", 2)).empty());
  // Workers importing with no CPU at all (an import lock copied while held, say): stuck there.
  auto s0 = process(101, 0, 0, kWorkerImporting, "S", "futex", 0.0);
  auto s1 = process(102, 0, 1, kWorkerImporting, "S", "futex", 0.0);
  auto stuck = classify_hang(snapshot({main, s0, s1}), context("spawn", 2));
  const Finding* f = find(stuck, "worker_hang");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(text(*f, "stage"), "worker_init");
  EXPECT_EQ(find(stuck, "main_process_bound"), nullptr);
}

TEST(WatchdogRules, WorkersExitingWhileTheIteratorEndsAreAShutdownNotADeath) {
  auto main = process(100, -1, -1, kMainJoiningWorkers, "S", "poll");
  auto exited = [](int pid, int worker, std::optional<int> code, std::optional<int> sig) {
    auto p = process(pid, 0, worker, nullptr, "Z", "");
    p.gone = true;
    p.exit_code = code;
    p.exit_signal = sig;
    return p;
  };
  auto clean = snapshot({main, exited(101, 0, 0, std::nullopt), exited(102, 1, 0, std::nullopt)});
  EXPECT_TRUE(classify_hang(clean, context("spawn", 2)).empty());
  EXPECT_TRUE(judge_hang(clean, context("spawn", 2)).progressing);
  // Killed while the iterator ends is still a death.
  auto killed = snapshot({main, exited(101, 0, std::nullopt, 9), exited(102, 1, 0, std::nullopt)});
  ASSERT_NE(find(classify_hang(killed, context("spawn", 2)), "worker_died"), nullptr);
  EXPECT_FALSE(judge_hang(killed, context("spawn", 2)).progressing);
  // The same clean exits while the main process waits for a batch: a death (it never sends it).
  auto waiting = process(100, -1, -1, kMainWaiting, "S", "poll");
  auto early = snapshot({waiting, exited(101, 0, 0, std::nullopt)});
  EXPECT_NE(find(classify_hang(early, context("spawn", 2)), "worker_died"), nullptr);
}

// Two ranks (torchrun): rank 1's worker is stuck in __getitem__ and its main process waits in
// its loader; rank 0's main process waits for rank 1 in the gradient all-reduce (backward).
// The finding is about rank 1's loader and says rank 0 waits for it; rank 0's own loader,
// whose worker is idle and whose main process is not in it, is not a second hang.
constexpr const char* kMainInBackward =
    R"(Current thread 0x00007f955c61db80 (most recent call first):
  File "/py/site-packages/torch/autograd/graph.py", line 979 in _engine_run_backward
  File "/py/site-packages/torch/autograd/__init__.py", line 395 in backward
  File "/py/site-packages/torch/_tensor.py", line 623 in backward
  File "/home/u/train.py", line 39 in train
)";

wd::HangContext two_ranks() {
  wd::HangContext c = context("fork");
  c.loaders[0].loader = 1;
  c.loaders[0].num_workers = 1;
  c.loaders[0].main_pid = 200;
  c.loaders[0].rank = 0;
  c.loaders[0].waiting_worker = 0;
  c.loaders[0].outstanding.clear();
  wd::LoaderContext l = c.loaders[0];
  l.loader = 2;
  l.main_pid = 100;
  l.rank = 1;
  l.waiting_batch = 0;
  c.loaders.push_back(l);
  return c;
}

TEST(WatchdogRules, AStuckRankIsNamedAndTheOthersWaitForItInTheCollective) {
  auto snap = snapshot({process(100, -1, -1, kMainWaiting, "S", "poll"),
                        process(101, 2, 0, kWorkerInGetitem),
                        process(200, -1, -1, kMainInBackward, "S", "futex"),
                        process(201, 1, 0, kWorkerIdle, "S", "poll")});
  auto findings = classify_hang(snap, two_ranks());
  ASSERT_EQ(ids(findings), std::vector<std::string>{"worker_hang"});  // not rank 0's loader
  const Finding& f = findings[0];
  EXPECT_EQ(f.loader, 2);
  EXPECT_EQ(text(f, "stage"), "getitem");
  EXPECT_EQ(text(f, "waiting_ranks"), "0");
  EXPECT_EQ(text(f, "waiting_rank_frames"),
            "rank 0 (pid 200): /py/site-packages/torch/autograd/graph.py:979 in "
            "_engine_run_backward");
  EXPECT_NE(f.title.find("; rank 0 waits for it in the collective"), std::string::npos) << f.title;
  EXPECT_NE(f.why.find("Fix rank 1 and every rank moves again"), std::string::npos) << f.why;
}

TEST(WatchdogRules, WithoutRanksNoRankIsSaidToWait) {
  wd::HangContext c = two_ranks();
  for (wd::LoaderContext& l : c.loaders) l.rank = -1;
  auto snap = snapshot({process(100, -1, -1, kMainWaiting, "S", "poll"),
                        process(101, 2, 0, kWorkerInGetitem),
                        process(200, -1, -1, kMainInBackward, "S", "futex"),
                        process(201, 1, 0, kWorkerIdle, "S", "poll")});
  auto findings = classify_hang(snap, c);
  ASSERT_EQ(ids(findings), std::vector<std::string>{"worker_hang"});
  EXPECT_FALSE(text(findings[0], "waiting_ranks").has_value());
}

}  // namespace
}  // namespace dldoctor::analyze
