#include "dldoctor_core/sample/process_reader.hpp"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/sample/io.hpp"
#include "dldoctor_core/sample/schedstat.hpp"
#include "dldoctor_core/sample/smaps_rollup.hpp"
#include "dldoctor_core/sample/stat.hpp"
#include "dldoctor_core/sample/status.hpp"
#include "dldoctor_core/sample/wchan.hpp"

namespace dldoctor::sample {
namespace {

int64_t tick_ns() {
  static const int64_t ns = [] {
    long hz = sysconf(_SC_CLK_TCK);
    return hz > 0 ? 1'000'000'000 / hz : 10'000'000;
  }();
  return ns;
}

int64_t page_bytes() {
  static const int64_t bytes = [] {
    long b = sysconf(_SC_PAGESIZE);
    return b > 0 ? int64_t(b) : int64_t(4096);
  }();
  return bytes;
}

std::string proc_path(int pid, const char* file) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/%s", pid, file);
  return path;
}

std::string task_path(int pid, int tid, const char* file) {
  char path[80];
  std::snprintf(path, sizeof path, "/proc/%d/task/%d/%s", pid, tid, file);
  return path;
}

std::optional<int64_t> sum(std::optional<int64_t> a, std::optional<int64_t> b) {
  if (!a || !b) return std::nullopt;
  return *a + *b;
}

/// A counter's increase per second; empty when either end is unknown or it went backwards.
std::optional<double> per_second(std::optional<int64_t> now, std::optional<int64_t> before,
                                 int64_t dt_ns) {
  if (!now || !before || dt_ns <= 0 || *now < *before) return std::nullopt;
  return double(*now - *before) * 1e9 / double(dt_ns);
}

}  // namespace

ProcessReader::ProcessReader(int pid, FdBudget& budget)
    : pid_(pid), stat_(proc_path(pid, "stat"), &budget) {}

void ProcessReader::list_threads(PassContext& ctx, int64_t num_threads) {
  ctx.tids.clear();
  if (num_threads <= 1) {
    ctx.tids.push_back(pid_);  // one thread: the main thread's own file is the whole process
    return;
  }
  if (!task_opened_) {
    task_dir_ = ProcDir(proc_path(pid_, "task"), &ctx.budget, true);
    task_opened_ = true;
  }
  task_dir_.numbers(ctx.buf, ctx.tids);
}

std::string ProcessReader::read_wchan(ReadBuffer& buf) {
  auto text = wchan_file_.read(buf);
  return text ? parse_wchan(*text) : std::string();
}

ReadStatus ProcessReader::read(PassContext& ctx, ProcessSample& out) {
  const int64_t t_ns = now_ns();
  auto stat_text = stat_.read(ctx.buf);
  if (!stat_text) return ReadStatus::gone;
  auto stat = parse_stat(*stat_text);
  if (!stat) return ReadStatus::gone;
  if (start_ticks_ && stat->start_ticks && *start_ticks_ != *stat->start_ticks) {
    return ReadStatus::other_process;  // only possible when stat is not kept open
  }
  start_ticks_ = stat->start_ticks;
  ++reads_;
  const bool have_last = last_t_ns_ > 0;
  const int64_t dt = t_ns - last_t_ns_;

  out.pid = pid_;
  out.ppid = stat->ppid;
  out.state = stat->state;
  out.comm = stat->comm;
  out.num_threads = int(stat->num_threads.value_or(0));
  const auto ticks = sum(stat->utime_ticks, stat->stime_ticks);
  if (ticks) out.cpu_ns_total = *ticks * tick_ns();
  if (stat->rss_pages) out.rss_bytes = *stat->rss_pages * page_bytes();

  // Scheduler time, summed over threads: /proc/<pid>/schedstat is the main thread alone.
  // A thread first seen in this pass was born since the last one, so all of its time counts.
  list_threads(ctx, stat->num_threads.value_or(1));
  const uint64_t stamp = reads_;
  int64_t run_delta = 0, wait_delta = 0;
  // Times given a CPU, over the threads whose count both passes read (else unknown).
  int64_t slices_delta = 0;
  bool slices_known = true;
  bool sched_known = false;
  int active = 0;
  out.threads.clear();
  for (int tid : ctx.tids) {
    auto [it, fresh] = threads_.try_emplace(tid);
    ThreadState& th = it->second;
    // The main thread's file sums a single-threaded process: kept like stat. Other threads'
    // come from the spare half of the budget.
    if (fresh) {
      th.schedstat =
          ProcFile(task_path(pid_, tid, "schedstat"), &ctx.budget, Records::one, tid != pid_);
    }
    th.seen = stamp;
    std::optional<SchedStat> sched;
    if (auto text = th.schedstat.read(ctx.buf)) sched = parse_schedstat(*text);
    std::optional<int64_t> thread_run_delta, thread_wait_delta;
    if (sched) {
      sched_known = true;
      if (th.run_ns && th.wait_ns) {
        thread_run_delta = std::max<int64_t>(0, sched->run_ns - *th.run_ns);
        thread_wait_delta = std::max<int64_t>(0, sched->wait_ns - *th.wait_ns);
        if (sched->timeslices && th.slices)
          slices_delta += std::max<int64_t>(0, *sched->timeslices - *th.slices);
        else
          slices_known = false;
        run_delta += *thread_run_delta;
        wait_delta += *thread_wait_delta;
        if (have_last && double(*thread_run_delta + *thread_wait_delta) >=
                             kActiveThreadShare * double(dt))
          ++active;
      } else if (have_last) {
        run_delta += sched->run_ns;
        wait_delta += sched->wait_ns;
        if (sched->timeslices)
          slices_delta += *sched->timeslices;
        else
          slices_known = false;
        if (double(sched->run_ns + sched->wait_ns) >= kActiveThreadShare * double(dt)) ++active;
      }
      th.run_ns = sched->run_ns;
      th.wait_ns = sched->wait_ns;
      th.slices = sched->timeslices;
    }
    if (!ctx.threads) continue;

    // A process of one thread is its own thread: its stat says all (and saves a read).
    std::optional<StatFields> tstat;
    if (ctx.tids.size() == 1 && tid == pid_ && out.num_threads <= 1) {
      tstat = *stat;
    } else {
      if (!th.stat.kept_open() && th.stat.path().empty()) {
        th.stat = ProcFile(task_path(pid_, tid, "stat"), &ctx.budget, Records::one, true);
      }
      if (auto text = th.stat.read(ctx.buf)) tstat = parse_stat(*text);
    }
    if (!tstat) continue;  // the thread ended between the listing and the read
    ThreadSample ts;
    ts.tid = tid;
    ts.state = tstat->state;
    ts.comm = std::move(tstat->comm);
    const auto tticks = sum(tstat->utime_ticks, tstat->stime_ticks);
    const bool thread_has_last = !fresh && have_last;
    if (thread_has_last && dt > 0) {
      if (thread_run_delta) {
        ts.cpu_pct = 100.0 * double(*thread_run_delta) / double(dt);
      } else if (tticks && th.ticks) {
        ts.cpu_pct = 100.0 * double((*tticks - *th.ticks) * tick_ns()) / double(dt);
      }
      if (thread_wait_delta) ts.runq_delay_pct = 100.0 * double(*thread_wait_delta) / double(dt);
    }
    th.ticks = tticks;
    out.threads.push_back(std::move(ts));
  }
  for (auto it = threads_.begin(); it != threads_.end();) {
    it = it->second.seen == stamp ? std::next(it) : threads_.erase(it);
  }

  if (have_last && dt > 0) {
    // schedstat is exact to the nanosecond, ticks only to 10 ms; but a thread that ended
    // during the interval takes its schedstat with it, while its ticks stay in the process's
    // stat. So ticks win only when they exceed schedstat by more than their own rounding.
    std::optional<int64_t> cpu_delta;
    if (sched_known) cpu_delta = run_delta;
    if (ticks && last_ticks_) {
      const int64_t ticks_delta = (*ticks - *last_ticks_) * tick_ns();
      if (!cpu_delta || ticks_delta > *cpu_delta + 2 * tick_ns()) cpu_delta = ticks_delta;
    }
    if (cpu_delta) out.cpu_pct = 100.0 * double(std::max<int64_t>(0, *cpu_delta)) / double(dt);
    if (sched_known) {
      out.runq_delay_pct = 100.0 * double(wait_delta) / double(dt);
      out.active_threads = active;
      if (slices_known && slices_delta > 0)
        out.runq_wait_per_slice_us = 1e-3 * double(wait_delta) / double(slices_delta);
    }
  }
  last_ticks_ = ticks;
  if (have_last) {
    out.minor_faults_per_s = per_second(stat->minor_faults, last_minflt_, dt);
    out.major_faults_per_s = per_second(stat->major_faults, last_majflt_, dt);
  }
  last_minflt_ = stat->minor_faults;
  last_majflt_ = stat->major_faults;

  // Slow sources (but smaps_rollup, which the sampler schedules): due on every slow_every-th
  // pass, staggered by pid so that a large tree's cost spreads over the passes; the rarest
  // (fd count) on every kRareEvery-th of those; all on a process's first read. With the caches
  // cold, as they are at 10 Hz, a /proc read costs 2-15 us on this kind of machine (status 14,
  // fd listing 9, wchan 5, io 4, stat 6, schedstat 2); stat and schedstat every pass already
  // take half the 1% budget for 64 workers.
  const uint64_t every = uint64_t(ctx.slow_every > 1 ? ctx.slow_every : 1);
  const uint64_t phase = ctx.pass + uint64_t(pid_);
  const bool slow = reads_ == 1 || phase % every == 0;
  const bool rare = reads_ == 1 || phase % (every * kRareEvery) == 0;
  if (slow) read_slow(ctx, t_ns, rare);
  // The wait channel of a D-state process (storage, NFS) matters at every pass; that of a
  // sleeper changes rarely and is refreshed on rare passes; a runner has none.
  if (stat->state == 'R') {
    wchan_.clear();
    wchan_fresh_ = false;
  } else if (stat->state == 'D' || !wchan_fresh_ || rare) {
    wchan_ = read_wchan(ctx.buf);
    wchan_fresh_ = true;
  }
  out.wchan = wchan_;
  out.rchar_total = io_.rchar;
  out.read_bytes_total = io_.read_bytes;
  out.rchar_per_s = rchar_per_s_;
  out.read_bytes_per_s = read_bytes_per_s_;
  out.voluntary_cs_per_s = voluntary_per_s_;
  out.involuntary_cs_per_s = involuntary_per_s_;
  if (!out.rss_bytes) out.rss_bytes = status_rss_bytes_;
  out.pss_bytes = pss_bytes_;
  out.private_dirty_bytes = private_dirty_bytes_;
  out.open_fds = open_fds_;

  last_t_ns_ = t_ns;
  return ReadStatus::ok;
}

void ProcessReader::read_slow(PassContext& ctx, int64_t t_ns, bool rare) {
  if (!slow_opened_) {
    status_ = ProcFile(proc_path(pid_, "status"), &ctx.budget, Records::one, true);
    io_file_ = ProcFile(proc_path(pid_, "io"), &ctx.budget, Records::one, true);
    wchan_file_ = ProcFile(proc_path(pid_, "wchan"), &ctx.budget, Records::one, true);
    fd_dir_ = ProcDir(proc_path(pid_, "fd"), &ctx.budget, true);
    slow_opened_ = true;
  }
  StatusFields status;
  if (auto text = status_.read(ctx.buf)) status = parse_status(*text);
  const int64_t dt = t_ns - last_slow_t_ns_;
  if (last_slow_t_ns_ > 0) {
    voluntary_per_s_ = per_second(status.voluntary_cs, last_voluntary_, dt);
    involuntary_per_s_ = per_second(status.involuntary_cs, last_involuntary_, dt);
  }
  last_voluntary_ = status.voluntary_cs;
  last_involuntary_ = status.involuntary_cs;

  IoFields io;
  if (auto text = io_file_.read(ctx.buf)) io = parse_io(*text);
  if (last_slow_t_ns_ > 0) {
    rchar_per_s_ = per_second(io.rchar, io_.rchar, dt);
    read_bytes_per_s_ = per_second(io.read_bytes, io_.read_bytes, dt);
  }
  io_ = io;
  status_rss_bytes_ = status.rss_bytes;
  last_slow_t_ns_ = t_ns;

  if (rare) open_fds_ = fd_dir_.count(ctx.buf);
}

std::optional<int64_t> ProcessReader::age_ns(int64_t boot_now_ns) const noexcept {
  if (!start_ticks_) return std::nullopt;
  return boot_now_ns - *start_ticks_ * tick_ns();
}

uint32_t ProcessReader::next_smaps_backoff(uint32_t backoff, std::optional<int64_t> before,
                                           std::optional<int64_t> now, int64_t dt_ns) noexcept {
  if (!before || !now) return 1;
  // Per second of the gap, and never less than a second's worth (reads taken close together).
  const double seconds = std::max(double(dt_ns) / 1e9, 1.0);
  const bool slow = double(*now - *before) < double(kSmapsGrowingBytesPerS) * seconds;
  return slow ? std::min(backoff * 2, kSmapsMaxBackoff) : 1;
}

int64_t ProcessReader::read_smaps(ReadBuffer& buf, uint64_t pass, ProcessSample& out) {
  const int64_t cpu_start = thread_cpu_ns();
  SmapsRollup smaps;
  if (auto text = read_whole(proc_path(pid_, "smaps_rollup").c_str(), buf)) {
    smaps = parse_smaps_rollup(*text);
  }
  const int64_t t = now_ns();
  smaps_backoff_ = next_smaps_backoff(smaps_backoff_, private_dirty_bytes_,
                                      smaps.private_dirty_bytes, smaps_t_ns_ ? t - smaps_t_ns_ : 0);
  smaps_t_ns_ = t;
  pss_bytes_ = out.pss_bytes = smaps.pss_bytes;
  private_dirty_bytes_ = out.private_dirty_bytes = smaps.private_dirty_bytes;
  out.smaps_fresh = true;
  smaps_pass_ = pass;
  return thread_cpu_ns() - cpu_start;
}

}  // namespace dldoctor::sample
