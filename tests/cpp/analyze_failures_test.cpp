// The failure rules (shm_exhausted, pinned_memory_pressure / ram_pressure, fd_limit,
// worker_died, cuda_oom / cuda_oom_risk) at the edges of their named thresholds, on streams
// shaped like the ones the hooks and the sampler produce (analyze_sim.hpp) plus the notes the
// watcher passes from the side logs; the CUDA batch-size estimator on fixed figures.
#include <gtest/gtest.h>

#include <csignal>

#include "analyze_sim.hpp"
#include "dldoctor_core/analyze/cuda_oom.hpp"
#include "dldoctor_core/analyze/rules.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

constexpr int64_t kMiB = int64_t(1) << 20;
constexpr int64_t kGiB = int64_t(1) << 30;

/// A session with `l` fed for 20 s (1 MiB batches), facts as given.
std::unique_ptr<Session> session(const Loader& l, const system::Facts& f) {
  auto s = std::make_unique<Session>();
  s->set_facts(f);
  feed(*s, l, kT0, 20);
  return s;
}

system::Facts shm_facts(std::optional<int64_t> free, std::optional<int64_t> total) {
  system::Facts f = facts(8);
  f.shm.free_bytes = free;
  f.shm.total_bytes = total;
  return f;
}

std::vector<report::Finding> whole(const Session& s) { return s.findings(0, Window::kWholeRun); }

std::vector<std::string> loud_ids(const std::vector<report::Finding>& fs) {
  std::vector<std::string> out;
  for (const auto& f : fs)
    if (f.severity != report::Severity::kInfo) out.push_back(f.id);
  return out;
}

ErrorNote error(std::string message, ErrorSource src = ErrorSource::kWorker,
                std::string type = "builtins.RuntimeError") {
  ErrorNote e;
  e.source = src;
  e.loader = 0;
  e.type = std::move(type);
  e.message = std::move(message);
  e.t_ns = kT0 + 5 * kS;
  return e;
}

trace::Event died(int worker, int pid, int64_t code, int64_t sig, uint16_t loader = 0) {
  return event(trace::EventKind::kWorkerDied, 1000, kT0 + 6 * kS, loader, worker, -1, 0, code,
               sig, pid);
}

// --- shm_exhausted --------------------------------------------------------------------------

// The default sim loader: 2 workers x prefetch_factor 2 + 1 held = 5 batches of 1 MiB in
// flight; with the 2x margin, /dev/shm needs 10 MiB free.
TEST(AnalyzeShm, PredictiveWarningFlipsAtTheMargin) {
  Loader l;
  EXPECT_TRUE(whole(*session(l, shm_facts(10 * kMiB, 10 * kMiB))).empty());
  auto fs = whole(*session(l, shm_facts(10 * kMiB - 1, 10 * kMiB)));
  ASSERT_EQ(ids(fs), std::vector<std::string>{"shm_exhausted"});
  EXPECT_EQ(fs[0].severity, report::Severity::kWarning);
  EXPECT_EQ(*num(fs[0], "in_flight_bytes"), double(5 * kMiB));
  EXPECT_EQ(*num(fs[0], "batches_in_flight"), 5.0);
  EXPECT_EQ(*num(fs[0], "shm_size_needed_bytes"), double(10 * kMiB));
  EXPECT_NE(fs[0].title.find("little margin"), std::string::npos) << fs[0].title;
  EXPECT_EQ(Session::verdict(fs), "healthy");  // a risk, not yet the failure
}

TEST(AnalyzeShm, PredictedOverflowSaysItWillNotFit) {
  Loader l;
  auto fs = whole(*session(l, shm_facts(5 * kMiB - 1, 5 * kMiB)));
  ASSERT_EQ(ids(fs), std::vector<std::string>{"shm_exhausted"});
  EXPECT_EQ(fs[0].severity, report::Severity::kWarning);
  EXPECT_NE(fs[0].title.find("will not fit"), std::string::npos) << fs[0].title;
  // Nothing smaller fits 5 MiB with the margin except one worker with prefetch 1 (2 MiB x 2).
  EXPECT_EQ(*text(fs[0], "fits_today"), "num_workers=1, prefetch_factor=1");
}

TEST(AnalyzeShm, UnknownShmOrNoWorkersSaysNothing) {
  Loader l;
  EXPECT_TRUE(whole(*session(l, shm_facts(std::nullopt, std::nullopt))).empty());
  Loader serial;
  serial.num_workers = 0;  // batches never leave the process
  EXPECT_EQ(find(whole(*session(serial, shm_facts(1 * kMiB, 1 * kMiB))), "shm_exhausted"),
            nullptr);
}

TEST(AnalyzeShm, NoSpaceFromSharedMemoryIsCriticalWithTheSizeAndASettingThatFits) {
  Loader l;
  l.prefetch_factor = 8;  // 2 x 8 + 1 = 17 MiB in flight
  auto s = session(l, shm_facts(12 * kMiB, 12 * kMiB));
  s->note(error("unable to allocate shared memory(shm) for file </torch_8814_3290110147_0>: "
                "No space left on device (28)"));
  auto fs = whole(*s);
  ASSERT_FALSE(fs.empty());
  EXPECT_EQ(fs[0].id, "shm_exhausted");
  EXPECT_EQ(fs[0].severity, report::Severity::kCritical);
  EXPECT_EQ(Session::verdict(fs), "shm_exhausted");
  EXPECT_EQ(*num(fs[0], "in_flight_bytes"), double(17 * kMiB));
  EXPECT_EQ(*num(fs[0], "shm_size_needed_bytes"), double(34 * kMiB));
  // 12 MiB / 2 = 6 MiB of room: 2 x P + 1 <= 6 -> prefetch_factor=2.
  EXPECT_EQ(*text(fs[0], "fits_today"), "prefetch_factor=2");
  EXPECT_NE(fs[0].fix.find("--shm-size=1g"), std::string::npos) << fs[0].fix;
  EXPECT_NE(fs[0].fix.find("remount,size=1G"), std::string::npos);
  EXPECT_NE(fs[0].fix.find("sizeLimit: 1Gi"), std::string::npos);
  EXPECT_NE(fs[0].fix.find("prefetch_factor=2"), std::string::npos);
}

TEST(AnalyzeShm, TextFromTheSendAndTheOlderWordingCountToo) {
  for (const char* msg :
       {"unable to write to file </torch_18692_1954506624>: No space left on device (28)",
        "[Errno 28] No space left on device: '/dev/shm/psm_4f2a'",
        "ERROR: Unexpected bus error encountered in worker. This might be caused by "
        "insufficient shared memory (shm)."}) {
    EXPECT_EQ(classify_error("builtins.RuntimeError", msg), ErrorKind::kShmNoSpace) << msg;
  }
  // A full disk is not /dev/shm.
  EXPECT_EQ(classify_error("builtins.OSError",
                           "[Errno 28] No space left on device: '/ckpt/model.pt'"),
            ErrorKind::kOther);
  Loader l;
  auto s = session(l, shm_facts(64 * kMiB, 64 * kMiB));
  s->note(error("[Errno 28] No space left on device: '/ckpt/model.pt'", ErrorSource::kUncaught,
                "builtins.OSError"));
  EXPECT_TRUE(whole(*s).empty());
}

TEST(AnalyzeShm, SigbusDeathIsCriticalAndWorkerDiedDefersToIt) {
  Loader l;
  auto s = session(l, shm_facts(64 * kMiB, 64 * kMiB));
  s->ingest(died(1, 2001, -1, SIGBUS));
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), (std::vector<std::string>{"shm_exhausted", "worker_died"}));
  EXPECT_EQ(fs[0].severity, report::Severity::kCritical);
  EXPECT_NE(fs[0].title.find("SIGBUS"), std::string::npos);
  EXPECT_EQ(fs[1].severity, report::Severity::kWarning);
  EXPECT_EQ(Session::verdict(fs), "shm_exhausted");
}

TEST(AnalyzeShm, ObservedUseFlipsAtNinetyPercent) {
  Loader l;
  auto with_use = [&](int64_t used) {
    auto s = session(l, shm_facts(std::nullopt, std::nullopt));
    sample::MachineSample m;
    m.shm_total_bytes = 100 * kMiB;
    m.shm_used_bytes = used;
    feed_passes(*s, kT0, 20, procs(l, 10.0, 10.0), m);
    return whole(*s);
  };
  EXPECT_TRUE(loud_ids(with_use(89 * kMiB)).empty());
  auto fs = with_use(90 * kMiB);
  ASSERT_EQ(loud_ids(fs), std::vector<std::string>{"shm_exhausted"});
  EXPECT_EQ(*num(fs[0], "shm_used_peak_bytes"), double(90 * kMiB));
}

// --- worker_died ----------------------------------------------------------------------------

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

// --- fd_limit -------------------------------------------------------------------------------

RuntimeNote runtime(std::optional<int64_t> soft, std::string strategy = "file_descriptor") {
  RuntimeNote r;
  r.loader = 0;
  r.pid = 1000;
  r.nofile_soft = soft;
  r.nofile_hard = soft;
  r.sharing_strategy = std::move(strategy);
  return r;
}

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
  s->note(error("unable to open shared memory object </torch_13990_4168065863_119> in "
                "read-write mode: Too many open files (24)",
                ErrorSource::kQueueFeeder));
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"fd_limit"});
  EXPECT_EQ(fs[0].severity, report::Severity::kCritical);
  EXPECT_EQ(*num(fs[0], "recommended_nofile"), 8192.0);  // max(8192, pow2(4 x 256))
  EXPECT_EQ(*num(fs[0], "batches_lost"), 1.0);  // the worker's feeder dropped the batch
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

TEST(FailureText, TheLineThatNamesTheCause) {
  const std::string reraised =
      "Caught RuntimeError in DataLoader worker process 0.\nOriginal Traceback (most recent "
      "call last):\n  File \"worker.py\", line 374, in _worker_loop\n    data = "
      "fetcher.fetch(index)\nRuntimeError: unable to allocate shared memory(shm) for file "
      "</torch_1_2_0>: No space left on device (28)\n";
  EXPECT_EQ(error_line(reraised, ErrorKind::kShmNoSpace),
            "RuntimeError: unable to allocate shared memory(shm) for file </torch_1_2_0>: No "
            "space left on device (28)");
  EXPECT_EQ(error_line("first\n\n  last line  \n", ErrorKind::kOther), "last line");
  EXPECT_EQ(bytes_text(24.0 * kMiB), "24 MiB");
  EXPECT_EQ(bytes_text(1.5 * kGiB), "1.5 GiB");
  EXPECT_EQ(bytes_text(512), "512 B");
}

// --- pinned_memory_pressure / ram_pressure ---------------------------------------------------

system::Facts memory_facts(int64_t total) {
  system::Facts f = facts(8);
  f.memory.total_bytes = total;
  f.memory.available_bytes = std::nullopt;
  return f;
}

std::vector<report::Finding> with_memory(const Loader& l, int64_t total, int64_t available,
                                         std::optional<double> swap_pages = std::nullopt,
                                         std::optional<double> pressure = std::nullopt) {
  auto s = session(l, memory_facts(total));
  sample::MachineSample m;
  m.mem_available_bytes = available;
  m.swap_in_per_s = swap_pages;
  m.swap_out_per_s = swap_pages;
  m.mem_pressure_some = pressure;
  feed_passes(*s, kT0, 20, procs(l, 10.0, 10.0), m);
  return whole(*s);
}

TEST(AnalyzeMemory, LowAvailableFlipsAtTenPercent) {
  Loader l;
  EXPECT_TRUE(with_memory(l, 1000 * kMiB, 100 * kMiB).empty());
  auto fs = with_memory(l, 1000 * kMiB, 99 * kMiB);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"ram_pressure"});
  EXPECT_EQ(fs[0].severity, report::Severity::kWarning);
  EXPECT_EQ(*num(fs[0], "mem_available_min_bytes"), double(99 * kMiB));
}

TEST(AnalyzeMemory, PinnedLoaderMakesItPinnedMemoryPressureWithThePinnedBytes) {
  Loader l;
  l.flags |= trace::kPinMemory;
  auto fs = with_memory(l, 1000 * kMiB, 50 * kMiB);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"pinned_memory_pressure"});
  EXPECT_EQ(*num(fs[0], "pinned_bytes_estimate"), double(5 * kMiB));  // (2 x 2 + 1) x 1 MiB
  EXPECT_NE(fs[0].fix.find("pin_memory=False"), std::string::npos);
}

TEST(AnalyzeMemory, SwapAndPressureThresholds) {
  Loader l;
  // Plenty available, swapping below 256 pages/s and pressure below 10%: nothing.
  EXPECT_TRUE(with_memory(l, 1000 * kMiB, 500 * kMiB, 255.0, 9.9).empty());
  EXPECT_EQ(ids(with_memory(l, 1000 * kMiB, 500 * kMiB, 256.0)),
            std::vector<std::string>{"ram_pressure"});
  EXPECT_EQ(ids(with_memory(l, 1000 * kMiB, 500 * kMiB, std::nullopt, 10.0)),
            std::vector<std::string>{"ram_pressure"});
}

TEST(AnalyzeMemory, ThrashingWhileTheLoopStallsIsCritical) {
  Loader l;
  l.fetch_ms = 100;  // 2 workers x 100 ms: 20 batches/s for a loop that wants 50
  auto fs = with_memory(l, 1000 * kMiB, 50 * kMiB, 1000.0, 30.0);
  const report::Finding* f = find(fs, "ram_pressure");
  ASSERT_NE(f, nullptr) << ::testing::PrintToString(ids(fs));
  EXPECT_EQ(f->severity, report::Severity::kCritical);
  // Low memory without the loop stalling stays a warning.
  Loader fast;
  EXPECT_EQ(find(with_memory(fast, 1000 * kMiB, 50 * kMiB, 1000.0, 30.0), "ram_pressure")
                ->severity,
            report::Severity::kWarning);
}

TEST(AnalyzeMemory, CgroupHeadroomFromTheJobsOwnCgroup) {
  Loader l;
  auto s = session(l, memory_facts(64 * kGiB));
  CgroupMemoryNote c;
  c.limit_bytes = 1000 * kMiB;
  c.usage_bytes = 901 * kMiB;  // headroom 9.9%
  c.t_ns = kT0 + kS;
  s->note(c);
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"ram_pressure"});
  EXPECT_NEAR(*num(fs[0], "cgroup_headroom_fraction"), 0.099, 1e-9);
  auto s2 = session(l, memory_facts(64 * kGiB));
  c.usage_bytes = 900 * kMiB;
  s2->note(c);
  EXPECT_TRUE(whole(*s2).empty());
}

TEST(AnalyzeMemory, PinMemoryWithoutAcceleratorIsInfoOnly) {
  Loader l;
  auto s = session(l, facts(8));
  RuntimeNote r = runtime(1024);
  r.pin_memory_requested = true;
  r.accelerator = false;
  s->note(r);
  auto fs = whole(*s);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"pinned_memory_pressure"});
  EXPECT_EQ(fs[0].severity, report::Severity::kInfo);
  EXPECT_EQ(Session::verdict(fs), "healthy");
  r.accelerator = true;
  auto s2 = session(l, facts(8));
  s2->note(r);
  EXPECT_TRUE(whole(*s2).empty());
}

// --- CUDA: the estimator ----------------------------------------------------------------------

// Peaks of the shape a ResNet-50-like fp32 training step shows (fixed ~1.5 GiB of weights,
// gradients, optimizer state and workspaces; ~90 MiB of activations per 224x224 sample).
// These are fixed figures in that shape, not a measurement taken for this test (no GPU here).
TEST(CudaEstimator, LineThroughTwoOrMoreBatchSizes) {
  const int64_t fixed = 1536 * kMiB, per = 90 * kMiB, total = 40 * kGiB;
  std::vector<PeakSample> peaks = {{32, fixed + 32 * per, std::nullopt},
                                   {64, fixed + 64 * per, std::nullopt},
                                   {128, fixed + 128 * per, std::nullopt}};
  auto fit = largest_fitting_batch(peaks, total);
  ASSERT_TRUE(fit);
  EXPECT_NEAR(fit->per_sample_bytes, double(per), 1.0);
  EXPECT_NEAR(fit->fixed_bytes, double(fixed), 64.0);
  // budget 0.9 x 40 GiB = 36 GiB: (36 GiB - 1.5 GiB) / 90 MiB = 392.5 -> 392.
  EXPECT_EQ(fit->largest_batch_size, 392);
  EXPECT_EQ(fit->batch_sizes, 3);
}

TEST(CudaEstimator, OneBatchSizeUsesTheMemoryHeldBetweenSteps) {
  const int64_t total = 16 * kGiB;
  // bs 64: peak 10 GiB, 2 GiB held between steps -> 128 MiB per sample.
  auto fit = largest_fitting_batch({{64, 10 * kGiB, 2 * kGiB}}, total);
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->per_sample_bytes, double(128 * kMiB));
  // (14.4 GiB - 2 GiB) / 128 MiB = 99.2 -> 99.
  EXPECT_EQ(fit->largest_batch_size, 99);
  // Without the baseline all of the peak counts per sample: a smaller, safer answer.
  auto safe = largest_fitting_batch({{64, 10 * kGiB, std::nullopt}}, total);
  ASSERT_TRUE(safe);
  EXPECT_EQ(safe->largest_batch_size, 92);  // 14.4 GiB / 160 MiB = 92.16
  EXPECT_LT(safe->largest_batch_size, fit->largest_batch_size);
}

TEST(CudaEstimator, AFailedBatchSizeCapsTheAnswerBelowIt) {
  const int64_t total = 16 * kGiB;
  // Measured fine at 32 (6 GiB) with 2 GiB fixed; 128 failed asking past the device.
  auto fit = largest_fitting_batch({{32, 6 * kGiB, 2 * kGiB}, {128, 18 * kGiB, std::nullopt, true}},
                                   total);
  ASSERT_TRUE(fit);
  EXPECT_EQ(fit->batch_sizes, 2);
  EXPECT_LT(fit->largest_batch_size, 128);
  EXPECT_GE(fit->largest_batch_size, 32);
  // A line through a failure that asked for less than the budget is still capped.
  auto capped = largest_fitting_batch({{64, 4 * kGiB, 1 * kGiB, false},
                                       {96, 5 * kGiB, std::nullopt, true}},
                                      total);
  ASSERT_TRUE(capped);
  EXPECT_EQ(capped->largest_batch_size, 95);
  EXPECT_TRUE(capped->capped_by_failure);
}

TEST(CudaEstimator, NothingUsableGivesNothing) {
  EXPECT_FALSE(largest_fitting_batch({}, 16 * kGiB));
  EXPECT_FALSE(largest_fitting_batch({{64, 8 * kGiB, std::nullopt}}, 0));
  EXPECT_FALSE(largest_fitting_batch({{0, 8 * kGiB, std::nullopt}}, 16 * kGiB));
  // The fixed part alone is past the budget: batch size 0, not a negative one.
  auto none = largest_fitting_batch({{8, 15 * kGiB, 15 * kGiB - 8 * kMiB}}, 16 * kGiB);
  ASSERT_TRUE(none);
  EXPECT_EQ(none->largest_batch_size, 0);
}

TEST(CudaOomText, ParsesCurrentAndOlderWording) {
  auto t = parse_cuda_oom(
      "CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.15 GiB "
      "of which 1.06 GiB is free. Including non-PyTorch memory, this process has 78.08 GiB "
      "memory in use. Of the allocated memory 76.50 GiB is allocated by PyTorch, and 1.07 GiB "
      "is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try "
      "setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.");
  EXPECT_EQ(*t.device, 0);
  EXPECT_EQ(*t.tried_bytes, 2 * kGiB);
  EXPECT_EQ(*t.total_bytes, int64_t(79.15 * double(kGiB)));
  EXPECT_EQ(*t.free_bytes, int64_t(1.06 * double(kGiB)));
  EXPECT_EQ(*t.allocated_bytes, int64_t(76.50 * double(kGiB)));
  EXPECT_EQ(*t.reserved_unallocated_bytes, int64_t(1.07 * double(kGiB)));
  auto old = parse_cuda_oom(
      "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 1; 7.79 GiB total capacity; 6.21 "
      "GiB already allocated; 15.50 MiB free; 6.43 GiB reserved in total by PyTorch)");
  EXPECT_EQ(*old.device, 1);
  EXPECT_EQ(*old.tried_bytes, 20 * kMiB);
  EXPECT_EQ(*old.total_bytes, int64_t(7.79 * double(kGiB)));
  EXPECT_EQ(*old.allocated_bytes, int64_t(6.21 * double(kGiB)));
  EXPECT_EQ(*old.free_bytes, int64_t(15.5 * double(kMiB)));
  auto none = parse_cuda_oom("something else entirely");
  EXPECT_FALSE(none.tried_bytes || none.total_bytes || none.device);
}

// --- CUDA: the rules ------------------------------------------------------------------------

CudaMemoryNote cuda_note(int64_t peak, int64_t baseline, int64_t total) {
  CudaMemoryNote c;
  c.loader = 0;
  c.peak_bytes = peak;
  c.allocated_bytes = baseline;
  c.total_bytes = total;
  c.t_ns = kT0 + kS;
  return c;
}

TEST(AnalyzeCuda, OomRaisedIsCriticalWithTheLargestBatchThatFits) {
  Loader l;  // batch_size 32
  auto s = session(l, facts(8));
  s->note(cuda_note(12 * kGiB, 4 * kGiB, 16 * kGiB));  // bs 32 (from the loader's config)
  s->note(error("CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity "
                "of 16.00 GiB of which 512.00 MiB is free. Of the allocated memory 14.50 GiB "
                "is allocated by PyTorch, and 200.00 MiB is reserved by PyTorch but "
                "unallocated.",
                ErrorSource::kUncaught, "torch.OutOfMemoryError"));
  auto fs = whole(*s);
  ASSERT_FALSE(fs.empty());
  EXPECT_EQ(fs[0].id, "cuda_oom");
  EXPECT_EQ(fs[0].severity, report::Severity::kCritical);
  EXPECT_EQ(*num(fs[0], "batch_size"), 32.0);
  EXPECT_EQ(*num(fs[0], "peak_allocated_bytes"), double(12 * kGiB));
  EXPECT_EQ(*num(fs[0], "tried_to_allocate_bytes"), double(3 * kGiB));
  // Steps at 32 peaked at 12 GiB, but the failed one needed at least 14.5 + 3 = 17.5 GiB
  // (inputs vary): the estimate takes the larger, 4 GiB fixed and 13.5 GiB / 32 per sample,
  // (14.4 - 4) GiB / 0.42 GiB = 24.7 -> 24.
  EXPECT_EQ(*num(fs[0], "largest_batch_size_that_fits"), 24.0);
  EXPECT_NE(fs[0].fix.find("batch_size=24"), std::string::npos) << fs[0].fix;
  EXPECT_NE(fs[0].fix.find("2 steps of gradient accumulation"), std::string::npos);
  EXPECT_EQ(find(fs, "cuda_oom_risk"), nullptr);
}

TEST(AnalyzeCuda, RiskFlipsAtNinetyPercentOfTheDevice) {
  Loader l;
  auto with_peak = [&](int64_t peak) {
    auto s = session(l, facts(8));
    s->note(cuda_note(peak, 2 * kGiB, 10 * kGiB));
    return whole(*s);
  };
  EXPECT_TRUE(with_peak(9 * kGiB - 1).empty());
  auto fs = with_peak(9 * kGiB);
  ASSERT_EQ(ids(fs), std::vector<std::string>{"cuda_oom_risk"});
  EXPECT_EQ(fs[0].severity, report::Severity::kWarning);
  EXPECT_EQ(*num(fs[0], "headroom_bytes"), double(1 * kGiB));
  EXPECT_EQ(*num(fs[0], "largest_batch_size_that_fits"), 32.0);  // 7 GiB / (7 GiB / 32)
}

TEST(AnalyzeCuda, WithoutCudaNothing) {
  Loader l;
  EXPECT_TRUE(whole(*session(l, facts(8))).empty());
}

// --- the failure log ------------------------------------------------------------------------

TEST(FailureLog, DeathsMergeByPidAndErrorsFoldByText) {
  FailureLog log;
  log.on_death_event(died(0, 2000, -1, SIGKILL));
  WorkerDeath d;
  d.loader = 0;
  d.worker = 0;
  d.pid = 2000;
  d.message = "killed";
  d.t_ns = kT0 + 6 * kS;
  log.note(d);
  WorkerDeath other = d;
  other.pid = 2001;
  log.note(other);
  for (int i = 0; i < 3; ++i) log.note(error("Too many open files", ErrorSource::kQueueFeeder));
  FailureView v = log.view(-1, 0);
  ASSERT_EQ(v.deaths.size(), 2u);
  EXPECT_EQ(*v.deaths[0].signal, SIGKILL);
  EXPECT_EQ(v.deaths[0].message, "killed");
  ASSERT_EQ(v.errors.size(), 1u);
  EXPECT_EQ(v.errors[0].count, 3);
  // The recent window leaves out what happened before it.
  EXPECT_TRUE(log.view(kT0 + 100 * kS, kT0 + 110 * kS).deaths.empty());
}

TEST(FailureLog, StaysBounded) {
  FailureLog log;
  for (int i = 0; i < 1000; ++i) {
    log.on_death_event(died(i % 4, 3000 + i, 1, 0));
    log.note(error("error " + std::to_string(i)));
  }
  FailureView v = log.view(-1, 0);
  EXPECT_EQ(v.deaths.size(), FailureLog::kMaxDeaths);
  EXPECT_EQ(v.errors.size(), FailureLog::kMaxErrors);
}

}  // namespace
}  // namespace dldoctor::analyze
