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

}  // namespace
}  // namespace dldoctor::analyze
