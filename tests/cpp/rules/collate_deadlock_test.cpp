// collate_deadlock on recorded captures: a lock inherited locked through fork with threads,
// the same under spawn, the CPU-share edge of "deadlocked", torch's default collate in a futex,
// and the source line that tells collate from getitem.
#include "dldoctor_core/analyze/rules/collate_deadlock.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"
#include "../hang_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;
using namespace hang_sim;

TEST(WatchdogRules, CollateLockAfterForkWithThreads) {
  auto snap = snapshot({process(100, -1, -1, kMainWaiting, "S", "poll", 0.001),
                        process(101, 0, 0, kWorkerIdle, "S", "poll"),
                        process(102, 0, 1, kWorkerInCollate)});
  auto findings = classify_hang(snap, context("fork", 5));
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
  auto snap = snapshot(
      {process(100, -1, -1, kMainWaiting, "S", "poll"), process(102, 0, 1, kWorkerInCollate)});
  auto findings = classify_hang(snap, context("spawn"));
  const Finding* f = find(findings, "collate_deadlock");
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(number(*f, "main_threads_at_fork").has_value());
  EXPECT_EQ(f->fix.find("multiprocessing_context"), std::string::npos);
  EXPECT_EQ(text(*f, "start_method"), "spawn");
  // fork with a single-threaded main process: no fork fact either.
  auto single = classify_hang(snap, context("fork", 1));
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
  auto under = classify_hang(snapshot({at_lock(wd::kBusyCpuShare * 0.98)}), context("fork", 2));
  ASSERT_NE(find(under, "collate_deadlock"), nullptr);
  EXPECT_EQ(text(*find(under, "collate_deadlock"), "wait"), "lock");
  auto over = classify_hang(snapshot({at_lock(wd::kBusyCpuShare * 1.02)}), context("fork", 2));
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
  auto findings = classify_hang(snapshot({process(102, 0, 1, stack)}), ctx);
  const Finding* f = find(findings, "collate_deadlock");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(text(*f, "wait"), "futex");
  EXPECT_EQ(text(*f, "collate_fn"), "default_collate");
  // The same stack in a process that is not in a futex (sleeping) is a hang, not a deadlock.
  auto sleeping = process(102, 0, 1, stack, "S", "clock_nanosleep");
  auto other = classify_hang(snapshot({sleeping}), ctx);
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
  auto findings = classify_hang(snapshot({p}), ctx);
  ASSERT_NE(find(findings, "collate_deadlock"), nullptr);
  EXPECT_EQ(text(*find(findings, "collate_deadlock"), "wait"), "lock");
  // The same frames where fetch's line indexes the dataset: getitem.
  p.stacks[0].frames[1].code = "data = [self.dataset[idx] for idx in possibly_batched_index]";
  findings = classify_hang(snapshot({p}), ctx);
  EXPECT_EQ(find(findings, "collate_deadlock"), nullptr);
  ASSERT_NE(find(findings, "worker_hang"), nullptr);
  EXPECT_EQ(text(*find(findings, "worker_hang"), "stage"), "getitem");
}

}  // namespace
}  // namespace dldoctor::analyze
