// Is the GPU idle while the loop waits for batches? The picture users look for first: NVML's
// utilization of the job's GPUs over the same window as the data stall. NVML's utilization
// is the share of time at least one kernel was running, not how busy the GPU was: a GPU
// running one small kernel all the time reads 100%, so idle here means "no kernel at all".
// The figure every throughput finding shows beside its data stall (analyze/capacity).
#pragma once

#include <optional>
#include <string>

#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze {

/// The job's GPUs over a window.
struct GpuIdle {
  /// "" when measured; else why there is no figure ("GPU not measured: ...", "the job used
  /// no GPU ...").
  std::string unknown;
  std::optional<double> idle_fraction;    ///< 1 − mean utilization / 100 of the job's GPUs
  std::optional<double> utilization_pct;  ///< that mean
  int devices = 0;                        ///< the job's GPUs
  /// false: no process of the job was found on a GPU (a container's own pid namespace hides
  /// them from NVML) though it used CUDA, so every GPU NVML lists was counted.
  bool attributed = true;
};

/// The job's GPUs: those a process of the job had a CUDA context on; all of them when none
/// was found but the job used CUDA (its CUDA memory notes or a CUDA error).
GpuIdle gpu_idle(const JobView& job);

/// gpu_idle_fraction and gpu_utilization_pct (when measured) and gpu_idle, the sentence:
/// "the GPU ran no kernel 64% of the loop while the main process waited for batches 70% of
/// it", or why it is unknown.
void add_gpu_idle_evidence(report::Finding& f, const GpuIdle& g,
                           std::optional<double> data_stall_fraction);

}  // namespace dldoctor::analyze
