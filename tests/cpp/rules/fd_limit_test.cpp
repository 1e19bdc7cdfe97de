// fd_limit at the edges of its thresholds: descriptors near RLIMIT_NOFILE under the
// file_descriptor strategy, "Too many open files" passing batches, and ancdata with a dead worker
// (that is the death's).
#include "dldoctor_core/analyze/rules/fd_limit.hpp"

#include <gtest/gtest.h>

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
