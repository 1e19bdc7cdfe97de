// What one sampling pass of a process tree yields. Counters are turned into rates against
// the previous pass of the same pid; a rate that cannot be computed yet (first pass, a
// source that is missing) is empty, never 0. Fields marked "slow" are read every
// SamplerOptions::smaps_every-th pass of a process (rates over that longer window); the passes
// in between repeat the last values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dldoctor::sample {

/// Share of an interval a thread must run or wait in the run queue to count as active.
/// A busy thread on a contended CPU runs little but waits the rest; a pool thread asleep on
/// its futex does neither.
inline constexpr double kActiveThreadShare = 0.2;

/// One thread's figures in one pass.
struct ThreadSample {
  int tid = 0;
  char state = '?';
  std::string comm;
  std::optional<double> cpu_pct;        ///< of one core, over the last interval
  std::optional<double> runq_delay_pct; ///< time runnable but waiting for a CPU, % of wall
};

/// One process's figures in one pass.
struct ProcessSample {
  int pid = 0;
  int ppid = 0;
  char state = '?';                      ///< R S D Z T ...
  std::string comm;
  int num_threads = 0;
  std::optional<double> cpu_pct;          ///< user+sys, % of one core over the interval
  std::optional<double> runq_delay_pct;   ///< schedstat wait time, % of wall (all threads)
  /// That wait over the times its threads were given a CPU (schedstat's third field), in µs:
  /// how long a thread that became runnable typically waited for a core. A process woken
  /// often on a free machine waits microseconds each time; beside busy threads that hold
  /// the cores, a millisecond or more.
  std::optional<double> runq_wait_per_slice_us;
  /// Threads that ran or waited for a CPU at least kActiveThreadShare of the interval (from
  /// the schedstat every thread's run and wait are read from anyway): a thread pool that
  /// computes or spins counts, one that sleeps does not. Empty when schedstat is unreadable.
  std::optional<int> active_threads;
  std::optional<double> voluntary_cs_per_s;   ///< status, all threads (slow)
  std::optional<double> involuntary_cs_per_s; ///< preempted: climbs with contention (slow)
  std::optional<int64_t> rss_bytes;       ///< VmRSS (from stat's rss, the same count)
  std::optional<int64_t> pss_bytes;       ///< smaps_rollup (slow, and within a CPU budget)
  std::optional<int64_t> private_dirty_bytes;
  bool smaps_fresh = false;               ///< pss/private_dirty were read in this very pass (else
                                          ///< they repeat an older read): a series over time
                                          ///< takes only the fresh ones
  std::optional<double> read_bytes_per_s;  ///< /proc/pid/io read_bytes: from storage (slow)
  std::optional<double> rchar_per_s;       ///< /proc/pid/io rchar: all reads, cache included (slow)
  std::optional<int64_t> read_bytes_total;
  std::optional<int64_t> rchar_total;
  std::optional<int64_t> cpu_ns_total;     ///< utime+stime so far
  std::optional<int64_t> open_fds;         ///< entries in /proc/pid/fd (every 5th slow pass)
  std::optional<double> minor_faults_per_s;  ///< from stat: copy-on-write breaks and first
                                             ///< touches of memory (cheap, every pass)
  std::optional<double> major_faults_per_s;  ///< faults that had to read from storage (mmap)
  std::string wchan;                      ///< kernel function it sleeps in ("" running/unknown;
                                          ///< every pass in D state, every 5th slow
                                          ///< pass while it sleeps in S)
  std::vector<ThreadSample> threads;      ///< filled when thread sampling is on
};

/// Machine-wide figures in one pass.
struct MachineSample {
  std::optional<double> cpu_busy_pct;         ///< all CPUs, from /proc/stat, % of total capacity
  std::optional<double> cpu_steal_pct;        ///< of that, stolen by the hypervisor (in busy)
  std::optional<int64_t> mem_available_bytes;  ///< (slow, as are all below)
  std::optional<double> swap_in_per_s;        ///< pages/s from /proc/vmstat pswpin
  std::optional<double> swap_out_per_s;
  std::optional<double> cpu_pressure_some;    ///< avg10 of /proc/pressure/cpu
  std::optional<double> io_pressure_some;
  std::optional<double> mem_pressure_some;
  std::optional<int64_t> shm_used_bytes;      ///< statvfs(/dev/shm)
  std::optional<int64_t> shm_total_bytes;
};

/// One GPU in one pass, as NVML reads it (sample/gpu_reader).
struct GpuSample {
  int index = 0;                          ///< NVML's index (nvidia-smi's)
  std::optional<double> utilization_pct;  ///< % of NVML's last sample period (1/6 s to 1 s)
                                          ///< a kernel ran: not how busy the GPU was
  std::optional<int64_t> memory_used_bytes;
  std::optional<int64_t> memory_total_bytes;
  /// GPU memory of the tree's processes on this device (NVML's usedGpuMemory, summed); empty
  /// when the process list could not be read (slow, as is tree_pids)
  std::optional<int64_t> tree_memory_bytes;
  std::vector<int> tree_pids;  ///< processes of the tree with a compute context on it
};

/// The GPUs in one pass.
struct GpuPass {
  bool measured = false;     ///< NVML answered (measured with no device: a machine without GPUs)
  std::string not_measured;  ///< why not, when !measured ("GPU not measured: <this>")
  std::vector<GpuSample> devices;
};

/// One pass over the tree.
struct Snapshot {
  int64_t t_ns = 0;            ///< CLOCK_MONOTONIC at the pass
  int64_t cost_ns = 0;         ///< thread CPU time the pass itself took
  uint64_t seq = 0;            ///< pass number of the sampler that took it, from 1
  std::vector<ProcessSample> processes;  ///< the root first, then descendants
  MachineSample machine;
  GpuPass gpu;  ///< SamplerOptions::gpus
};

}  // namespace dldoctor::sample
