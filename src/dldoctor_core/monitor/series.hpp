// The run over time, for the HTML report and the live view: per loader batches/s and data
// stall, per worker CPU, state, run-queue delay and getitem time, and the machine's shm,
// memory and storage reads. Points are time buckets that merge pairwise when the run grows
// long, so memory and the report's size stay bounded whatever the run length.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "dldoctor_core/analyze/pipeline_fill.hpp"
#include "dldoctor_core/analyze/window_stats.hpp"
#include "dldoctor_core/sample/snapshot.hpp"
#include "dldoctor_core/trace/event.hpp"

namespace dldoctor::monitor {

/// Width of a point at the start of a run: 5 sampler passes, fine enough to show a
/// short scenario's shape.
inline constexpr int64_t kSeriesBaseWidthNs = 500'000'000;
/// Points kept per series. Beyond, adjacent points merge and the width doubles: an hour
/// is 450 points of 8 s, and the report's JSON stays in the hundreds of KiB.
inline constexpr size_t kMaxSeriesPoints = 720;
/// Rates (batches/s, stall) are taken over at least this much time: a slow loader hands
/// out a few batches a second, and a 0.5 s point alone would flicker between 0 and 4/s.
inline constexpr int64_t kRateWindowNs = 2'000'000'000;
/// Samples kept per worker for the distribution of getitem (per sample) and collate
/// (per batch) times: enough for a box plot's quartiles and tails.
inline constexpr size_t kDistSamples = 256;
/// Process series kept (workers of every loader and epoch merge by worker id, plus main
/// processes); a job with more is cut, and the export says so.
inline constexpr size_t kMaxProcessSeries = 256;
/// The live view's window: short enough to move within a second of a change.
inline constexpr int64_t kLiveWindowNs = 2'000'000'000;

/// One loader's series.
struct LoaderSeries {
  uint16_t loader = 0;
  std::vector<std::optional<double>> batches_per_s;   ///< over kRateWindowNs up to the point
  std::vector<std::optional<double>> data_stall_pct;  ///< wait / (wait + step), same window
  int64_t batches = 0;                                ///< handed to the consumer, whole run
};

/// One process's series: a worker (all epochs of one worker id merge) or a main process.
struct ProcessSeries {
  std::string role;  ///< "worker" or "main"
  int loader = -1;   ///< -1 for a main process
  int worker = -1;   ///< -1 for a main process
  std::vector<int> pids;  ///< every pid it had (a new one per epoch without persistent workers)
  std::vector<std::optional<double>> cpu_pct;         ///< mean of the passes in the point
  std::vector<std::optional<double>> runq_delay_pct;  ///< idem
  std::vector<std::optional<double>> getitem_ms;      ///< per sample, mean of its batches
  std::vector<std::optional<double>> collate_ms;      ///< per batch, mean
  std::string state;  ///< one letter per point (R S D Z ...), ' ' when not sampled
  int64_t batches = 0;
  std::vector<float> getitem_ms_sample;  ///< a uniform sample of per-sample getitem times
  std::vector<float> collate_ms_sample;  ///< a uniform sample of per-batch collate times
};

/// The machine's series.
struct MachineSeries {
  std::vector<std::optional<double>> cpu_busy_pct;
  std::vector<std::optional<double>> shm_used_bytes;
  std::vector<std::optional<double>> mem_available_bytes;
  std::vector<std::optional<double>> read_mb_per_s;   ///< storage reads of the job's processes
  std::vector<std::optional<double>> rchar_mb_per_s;  ///< all their reads, page cache included
  std::optional<int64_t> shm_total_bytes;
};

/// One GPU's series (NVML through the sampler).
struct GpuSeries {
  int index = 0;                                         ///< NVML's index (nvidia-smi's)
  std::vector<std::optional<double>> utilization_pct;    ///< % of time a kernel was running
  std::vector<std::optional<double>> memory_used_bytes;  ///< the whole device's
  std::vector<std::optional<double>> job_memory_bytes;   ///< the job's processes' on it
  std::optional<int64_t> memory_total_bytes;
  bool job = false;  ///< a process of the job had a CUDA context on it
};

/// Everything recorded, ready to serialise.
struct SeriesData {
  int64_t t0_ns = 0;     ///< CLOCK_MONOTONIC of point 0's start
  int64_t width_ns = 0;  ///< of every point
  std::vector<double> t_s;  ///< each point's middle, seconds from t0 (the last may be partial)
  std::vector<LoaderSeries> loaders;
  std::vector<ProcessSeries> processes;
  MachineSeries machine;
  bool processes_cut = false;  ///< more processes than kMaxProcessSeries were seen
  std::vector<GpuSeries> gpus;  ///< by NVML index; empty when not measured
  std::string gpu_not_measured;  ///< why not ("" when NVML answered in some pass)
};

/// What the live view shows now.
struct LiveData {
  int64_t t_ns = 0;
  double window_s = 0;
  struct Loader {
    uint16_t loader = 0;
    int num_workers = 0;
    int64_t batches = 0;
    std::optional<double> batches_per_s;
    std::optional<double> data_stall_pct;
  };
  struct Process {
    std::string role;
    int loader = -1;
    int worker = -1;
    int pid = 0;
    char state = '?';
    std::optional<double> cpu_pct;
    std::optional<double> runq_delay_pct;
    std::optional<double> getitem_ms;  ///< per sample over the window, else its last batch
    int64_t batches = 0;
  };
  std::vector<Loader> loaders;
  std::vector<Process> processes;  ///< those in the newest pass or with batches in the window
  std::optional<double> cpu_busy_pct;
  std::optional<int64_t> shm_used_bytes;
  std::optional<int64_t> shm_total_bytes;
  std::optional<int64_t> mem_available_bytes;
  struct Gpu {
    int index = 0;
    std::optional<double> utilization_pct;
    std::optional<int64_t> memory_used_bytes, memory_total_bytes, job_memory_bytes;
    bool job = false;  ///< a process of the job is on it now
  };
  std::vector<Gpu> gpus;         ///< the newest pass's
  std::string gpu_not_measured;  ///< why there are none ("" when measured)
};

/// Records a run's series from its events and sampler passes. Thread-safe (one mutex,
/// held per batch of events or per pass).
class SeriesRecorder {
 public:
  /// Sets point 0's start (the run's start); earlier events count in point 0.
  void start(int64_t t0_ns);
  /// Events drained from the ring, in drain order.
  void ingest(const std::vector<trace::Event>& events);
  /// One sampler pass.
  void ingest(const sample::Snapshot& s);

  /// The series so far.
  SeriesData data() const;
  /// The figures of the last kLiveWindowNs before `now_ns`.
  LiveData live(int64_t now_ns) const;

 private:
  struct Mean {
    double sum = 0;
    uint32_t n = 0;
    void add(const std::optional<double>& v) noexcept {
      if (v) sum += *v, ++n;
    }
    std::optional<double> get() const noexcept {
      return n ? std::optional<double>(sum / n) : std::nullopt;
    }
    Mean& operator+=(const Mean& o) noexcept {
      sum += o.sum, n += o.n;
      return *this;
    }
  };
  struct LoaderPoint {
    int64_t batches = 0, stepped = 0, wait_ns = 0, step_ns = 0;
    LoaderPoint& operator+=(const LoaderPoint& o) noexcept {
      batches += o.batches, stepped += o.stepped, wait_ns += o.wait_ns, step_ns += o.step_ns;
      return *this;
    }
  };
  struct ProcPoint {
    Mean cpu, runq, getitem_ms, collate_ms;
    char state = 0;  // the newest letter seen in the point
    ProcPoint& operator+=(const ProcPoint& o) noexcept {
      cpu += o.cpu, runq += o.runq, getitem_ms += o.getitem_ms, collate_ms += o.collate_ms;
      if (o.state) state = o.state;
      return *this;
    }
  };
  struct MachinePoint {
    Mean cpu_busy, shm_used, mem_available, read_bps, rchar_bps;
    MachinePoint& operator+=(const MachinePoint& o) noexcept {
      cpu_busy += o.cpu_busy, shm_used += o.shm_used, mem_available += o.mem_available;
      read_bps += o.read_bps, rchar_bps += o.rchar_bps;
      return *this;
    }
  };
  struct GpuPoint {
    Mean util, used, job;
    GpuPoint& operator+=(const GpuPoint& o) noexcept {
      util += o.util, used += o.used, job += o.job;
      return *this;
    }
  };
  struct GpuRec {
    std::vector<GpuPoint> points;
    std::optional<int64_t> total;
    bool job = false;
  };
  /// Sums per 250 ms slot over the last few seconds, for the live view.
  template <class S>
  struct Slots {
    static constexpr int64_t kSlotNs = 250'000'000;
    static constexpr size_t kN = 16;  // 4 s: the live window and the drain's lag
    struct Slot {
      int64_t id = -1;
      S sums{};
    };
    Slot slots[kN];
    S* at(int64_t t_ns) noexcept {
      const int64_t id = t_ns / kSlotNs;
      Slot& s = slots[size_t(id % int64_t(kN))];
      if (s.id != id) {
        if (s.id > id) return nullptr;
        s.id = id, s.sums = S{};
      }
      return &s.sums;
    }
    S sum(int64_t from_ns, int64_t to_ns) const noexcept {
      S out{};
      for (const Slot& s : slots)
        if (s.id >= from_ns / kSlotNs && s.id <= to_ns / kSlotNs) out += s.sums;
      return out;
    }
  };
  struct LoaderRec {
    int num_workers = 0;
    int main_pid = 0;
    int64_t batches = 0;
    analyze::PipelineFill fill;
    std::vector<LoaderPoint> points;
    Slots<LoaderPoint> live;
  };
  using ProcKey = std::tuple<int, int, int>;  // (loader, worker, 0) or (-1, -1, main pid)
  struct ProcRec {
    std::vector<int> pids;
    std::vector<ProcPoint> points;
    int64_t batches = 0;
    uint64_t seen_pass = 0;  // sampler pass that last saw it
    int last_pid = 0;
    char state = '?';
    std::optional<double> cpu_pct, runq_delay_pct, last_getitem_ms;
    Slots<Mean> live_getitem;
    analyze::Reservoir<float> getitem_sample{kDistSamples};
    analyze::Reservoir<float> collate_sample{kDistSamples};
  };

  size_t point_locked(int64_t t_ns);
  void compact_locked();
  ProcRec* proc_locked(const ProcKey& key, int pid);
  template <class P>
  static P& at(std::vector<P>& v, size_t i) {
    if (v.size() <= i) v.resize(i + 1);
    return v[i];
  }

  mutable std::mutex mu_;
  int64_t t0_ns_ = 0;
  bool started_ = false;
  int64_t width_ns_ = kSeriesBaseWidthNs;
  size_t points_ = 0;
  int64_t latest_ns_ = 0;
  std::map<uint16_t, LoaderRec> loaders_;
  std::map<ProcKey, ProcRec> procs_;
  bool procs_cut_ = false;
  std::unordered_map<int, ProcKey> pid_key_;  // pids whose role an event told
  std::vector<MachinePoint> machine_;
  sample::MachineSample last_machine_;
  std::map<int, GpuRec> gpus_;  // by NVML index
  sample::GpuPass last_gpu_;
  bool gpu_measured_ = false;
  static constexpr size_t kMaxGpus = 64;
  uint64_t last_pass_ = 0;
};

}  // namespace dldoctor::monitor
