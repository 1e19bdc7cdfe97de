// fd_limit at the edges of its thresholds: descriptors near RLIMIT_NOFILE under the
// file_descriptor strategy, "Too many open files" passing batches, and ancdata with a dead worker
// (that is the death's).
#include "dldoctor_core/analyze/rules/fd_limit.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

/// Passes in which the main process holds `fds` descriptors.
void feed_fds(Session& s, const Loader& l, int64_t fds) {
  for (int i = 0; i < 50; ++i) {
    sample::Snapshot snap;
    snap.t_ns = kT0 + i * 400 * kMs;
    sample::ProcessSample m;
    m.pid = l.main_pid;
    m.open_fds = fds;
    snap.processes.push_back(m);
    sample::ProcessSample w;
    w.pid = l.worker_pid(0);
    w.ppid = l.main_pid;
    w.open_fds = 20;
    snap.processes.push_back(w);
    s.ingest(snap);
  }
}

TEST(AnalyzeFdLimit, NearTheLimitFlipsAtEightyPercent) {
  Loader l;
  auto with = [&](int64_t fds, std::string strategy) {
    auto s = session(l, facts(8));
    s->note(runtime(256, std::move(strategy)));
    feed_fds(*s, l, fds);
    return whole(*s);
  };
  EXPECT_TRUE(with(204, "file_descriptor").empty());  // 0.8 x 256 = 204.8
  auto fs = with(205, "file_descriptor");
  ASSERT_EQ(ids(fs), std::vector<std::string>{"fd_limit"});
  EXPECT_EQ(fs[0].severity, report::Severity::kWarning);
  EXPECT_EQ(*num(fs[0], "open_fds_peak"), 205.0);
  EXPECT_EQ(*num(fs[0], "open_fds_peak_pid"), double(l.main_pid));
  EXPECT_EQ(*num(fs[0], "nofile_soft"), 256.0);
  // Under file_system the descriptors are the job's own files: not this rule's business.
  EXPECT_TRUE(with(250, "file_system").empty());
}

TEST(AnalyzeFdLimit, TooManyOpenFilesIsCriticalWithTheLimitToSet) {
  Loader l;
  auto s = session(l, facts(8));
  s->note(runtime(256));
  s->note(
      error("unable to open shared memory object </torch_13990_4168065863_119> in "
            "read-write mode: Too many open files (24)",
            ErrorSource::kQueueFeeder));
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"fd_limit"});
  EXPECT_EQ(fs[0].severity, report::Severity::kCritical);
  EXPECT_EQ(*num(fs[0], "recommended_nofile"), 8192.0);  // max(8192, pow2(4 x 256))
  EXPECT_EQ(*num(fs[0], "batches_lost"), 1.0);           // the worker's feeder dropped the batch
  EXPECT_NE(fs[0].fix.find("ulimit -n 8192"), std::string::npos) << fs[0].fix;
  EXPECT_NE(fs[0].fix.find("set_sharing_strategy('file_system')"), std::string::npos);
  EXPECT_NE(fs[0].fix.find("above the hard limit 256"), std::string::npos);
  EXPECT_EQ(Session::verdict(fs), "fd_limit");
}

/// The issue-15 layout: the job's own process (pid 1000, loader 0) runs with the limit the job
/// started with; a child it made (pid 2000) lowered its own to 100 and started loader 1, whose
/// worker (pid 2001) ran out.
std::unique_ptr<Session> child_ran_out(const Loader& l) {
  system::Facts f = facts(8);
  f.limits.nofile_soft = 20000;
  f.limits.nofile_hard = 1 << 20;
  auto s = session(l, f);
  RuntimeNote job = runtime(20000);
  job.nofile_hard = 1 << 20;
  s->note(job);
  RuntimeNote child = runtime(100);
  child.loader = 1;
  child.pid = 2000;
  child.nofile_hard = 1 << 20;
  child.t_ns = kT0 + kS;
  s->note(child);
  ErrorNote e = error(
      "RuntimeError: unable to open shared memory object </torch_1_2_3> in "
      "read-write mode: Too many open files (24)",
      ErrorSource::kQueueFeeder);
  e.loader = 1;
  e.pid = 2001;
  s->note(e);
  return s;
}

TEST(AnalyzeFdLimit, TheLimitIsThatOfTheProcessThatRanOut) {
  Loader l;
  auto s = child_ran_out(l);
  // A later epoch of the job's own loader is the newest note: it must not be the one quoted.
  RuntimeNote later = runtime(20000);
  later.nofile_hard = 1 << 20;
  later.t_ns = kT0 + 3 * kS;
  s->note(later);
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"fd_limit"});
  EXPECT_EQ(*num(fs[0], "nofile_soft"), 100.0);  // the worker inherited its parent's 100
  EXPECT_EQ(*num(fs[0], "process_pid"), 2001.0);
  EXPECT_EQ(*num(fs[0], "job_started_nofile_soft"), 20000.0);
  EXPECT_NE(fs[0].title.find("process 2001, RLIMIT_NOFILE 100"), std::string::npos) << fs[0].title;
  EXPECT_NE(fs[0].fix.find("Raise the limit where it is lowered"), std::string::npos) << fs[0].fix;
  EXPECT_EQ(fs[0].fix.find("131072"), std::string::npos) << fs[0].fix;  // not the job's limit
  EXPECT_EQ(*num(fs[0], "recommended_nofile"), 8192.0);
}

TEST(AnalyzeFdLimit, AProcessThatLoweredItsOwnLimitIsQuotedWithIt) {
  Loader l;
  auto s = child_ran_out(l);
  RuntimeNote own = runtime(50);  // the worker lowered its own (in worker_init_fn)
  own.loader = 1;
  own.pid = 2001;
  own.process_only = true;
  own.t_ns = kT0 + 2 * kS;
  s->note(own);
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"fd_limit"});
  EXPECT_EQ(*num(fs[0], "nofile_soft"), 50.0);
  EXPECT_EQ(*num(fs[0], "nofile_hard"), 50.0);
  EXPECT_EQ(fs[0].evidence.end(),
            std::find_if(fs[0].evidence.begin(), fs[0].evidence.end(), [](const auto& x) {
              return x.name == "sharing_strategy" && std::get<std::string>(x.value).empty();
            }));
}

TEST(AnalyzeFdLimit, WithoutItsOwnNoteAProcessHasItsLoadersLimit) {
  Loader l;
  auto s = child_ran_out(l);
  RuntimeNote other = runtime(64);  // another process's own limit: not the one that ran out
  other.pid = 3000;
  other.process_only = true;
  s->note(other);
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"fd_limit"});
  EXPECT_EQ(*num(fs[0], "nofile_soft"), 100.0);
}

TEST(AnalyzeFdLimit, AncdataIsTheSameFailureSeenByTheMainProcess) {
  EXPECT_EQ(classify_error("builtins.RuntimeError", "received 0 items of ancdata"),
            ErrorKind::kTooManyOpenFiles);
  EXPECT_EQ(classify_error("builtins.OSError", "[Errno 24] Too many open files"),
            ErrorKind::kTooManyOpenFiles);
  EXPECT_EQ(classify_error("builtins.ValueError", "bad sample 7"), ErrorKind::kOther);
}

TEST(AnalyzeFdLimit, AncdataWithADeadWorkerIsTheDeathNotTheLimit) {
  Loader l;
  auto s = session(l, facts(8));
  s->note(error("received 0 items of ancdata", ErrorSource::kLoader));
  s->ingest(died(0, 2000, -1, SIGKILL));
  auto fs = whole(*s);
  EXPECT_EQ(find(fs, "fd_limit"), nullptr);
  EXPECT_NE(find(fs, "worker_died"), nullptr);
}

}  // namespace
}  // namespace dldoctor::analyze
