// What the analyzer remembers of the GPUs from the sampler's passes: the newest passes (for
// the recent window) and running sums per device over the job's loop (for the whole run).
// Bounded whatever the length of the run.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/sample/snapshot.hpp"

namespace dldoctor::analyze {

/// GPU state of one Session.
class GpuTrack {
 public:
  static constexpr int64_t kKeepNs = 20'000'000'000;  ///< passes kept: the 10 s window, twice
  static constexpr size_t kKeepPasses = 512;          ///< and at most this many
  static constexpr size_t kMaxDevices = 64;           ///< devices summed (a node has up to 16)

  /// One pass at `t_ns`; `in_loop`: after the job's first event, so it counts in the whole
  /// run's sums (before it the model is being built, and an idle GPU says nothing).
  void ingest(int64_t t_ns, const sample::GpuPass& pass, bool in_loop);
  /// The GPUs over the passes in [from_ns, to_ns]; from_ns < 0: the whole run's sums.
  GpuView view(int64_t from_ns, int64_t to_ns) const;

 private:
  struct Sums {
    double util_sum = 0;
    int util_n = 0;
    std::optional<int64_t> used_max, total, job_max;
    bool job = false;
    void add(const sample::GpuSample& g);
  };
  struct Pass {
    int64_t t_ns = 0;
    sample::GpuPass gpu;
  };
  static GpuDeviceView device_view(int index, const Sums& s);

  std::deque<Pass> kept_;
  std::map<int, Sums> whole_;  // by NVML index
  int64_t latest_ns_ = 0;
  bool measured_ = false;     // NVML answered in some pass of the whole run
  std::string not_measured_;  // the newest reason when it did not
};

}  // namespace dldoctor::analyze
