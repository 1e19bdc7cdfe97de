// worker_died while the job runs (the reason from the exit status and the memory counters, at
// the edges of their thresholds, folded by reason) and at a hang (a worker gone or a zombie).
#include "dldoctor_core/analyze/rules/worker_died.hpp"

#include <gtest/gtest.h>

#include <csignal>

#include "../analyze_sim.hpp"
#include "../hang_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;
using namespace hang_sim;

WorkerDeath death_note(int worker, int pid) {
  WorkerDeath d;
  d.loader = 0;
  d.worker = worker;
  d.pid = pid;
  d.t_ns = kT0 + 6 * kS;
  return d;
}

TEST(AnalyzeWorkerDied, OomKillCounterNamesTheOomKiller) {
  Loader l;
  auto s = session(l, facts(8));
  s->ingest(died(0, 2000, -1, SIGKILL));
  WorkerDeath d = death_note(0, 2000);
  d.message = "DataLoader worker (pid 2000) is killed by signal: Killed.";
  d.cgroup_oom_kills = 1;
  d.cgroup_limit_bytes = 256 * kMiB;
  d.cgroup_peak_bytes = 256 * kMiB;
  s->note(d);
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"worker_died"});  // event + note: one death
  const auto& f = fs[0];
  EXPECT_EQ(f.severity, report::Severity::kCritical);
  EXPECT_EQ(*text(f, "reason"), "the OOM killer");
  EXPECT_EQ(*text(f, "signal_name"), "SIGKILL");
  EXPECT_EQ(*num(f, "pid"), 2000.0);
  EXPECT_EQ(*num(f, "cgroup_oom_kills"), 1.0);
  EXPECT_FALSE(num(f, "deaths"));
  EXPECT_NE(f.fix.find("num_workers=1"), std::string::npos) << f.fix;
  EXPECT_EQ(Session::verdict(fs), "worker_died");
}

TEST(AnalyzeWorkerDied, SigkillNearTheLimitFlipsAtNinetyFivePercent) {
  Loader l;
  auto reason_at = [&](int64_t peak) {
    auto s = session(l, facts(8));
    s->ingest(died(0, 2000, -1, SIGKILL));
    WorkerDeath d = death_note(0, 2000);
    d.cgroup_limit_bytes = 1000 * kMiB;
    d.cgroup_peak_bytes = peak;
    s->note(d);
    return *text(whole(*s)[0], "reason");
  };
  EXPECT_EQ(reason_at(950 * kMiB), "the OOM killer (memory at its limit)");
  EXPECT_EQ(reason_at(949 * kMiB), "SIGKILL from outside the job (no OOM kill was counted)");
}

TEST(AnalyzeWorkerDied, ExitCodeWithStderrTail) {
  Loader l;
  auto s = session(l, facts(8));
  s->ingest(died(1, 2001, 3, 0));
  WorkerDeath d = death_note(1, 2001);
  d.stderr_tail = "loading shard 17\nfatal: shard 17 is corrupt, giving up\n";
  s->note(d);
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"worker_died"});
  EXPECT_EQ(*num(fs[0], "exit_code"), 3.0);
  EXPECT_FALSE(num(fs[0], "signal"));
  EXPECT_NE(text(fs[0], "stderr_tail")->find("shard 17 is corrupt"), std::string::npos);
  EXPECT_NE(fs[0].title.find("exited with code 3"), std::string::npos) << fs[0].title;
}

TEST(AnalyzeWorkerDied, SegfaultAndRepeatedDeathsFoldByReason) {
  Loader l;
  auto s = session(l, facts(8));
  s->ingest(died(0, 2000, -1, SIGSEGV));
  s->ingest(died(1, 2001, -1, SIGSEGV));
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"worker_died"});
  EXPECT_EQ(*text(fs[0], "reason"), "a segmentation fault in native code");
  EXPECT_EQ(*num(fs[0], "deaths"), 2.0);
}

TEST(AnalyzeWorkerDied, NoDeathNoFinding) {
  Loader l;
  EXPECT_TRUE(whole(*session(l, facts(8))).empty());
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
  auto findings = classify_hang(snap, context("fork", 2));
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
  auto fz = classify_hang(snapshot({z}), context("fork", 2));
  ASSERT_NE(find(fz, "worker_died"), nullptr);
  EXPECT_EQ(number(*find(fz, "worker_died"), "exit_code"), 1);
}

}  // namespace
}  // namespace dldoctor::analyze
