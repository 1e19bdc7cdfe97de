// slow_handover: the workers have each batch ready before the main process asks for it (and
// could make more than it asks for), and the loop still waits, because moving a batch from
// its worker into the main process is slow. The proof is the part of each wait after the
// batch's fetch ended (measured per batch, LoaderView::handover_measured). Under torch's
// default file_descriptor sharing strategy every tensor of a batch is passed by a round trip
// to the worker that made it, served by a thread of that worker that needs its GIL: a batch
// of many tensors, or a worker busy in Python, makes each hand-over long. More workers do not
// help; fewer tensors a batch, or the file_system strategy, do.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/data_bound.hpp"
#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze::slow_handover {

/// Share of the loop spent handing over batches that were already made at which the
/// hand-over is a cause of its own: the data-stall threshold, since a loop that waits that
/// long on its loader is not one whose loader keeps up, whatever the wait is for.
inline constexpr double kHandoverFraction = kDataStallFraction;

/// Hand-over per batch below which it is not named, whatever its share of a fast loop: one
/// tensor, or a few, crosses from a worker in 0.3-1 ms on a loaded 2-core VM (the pipe, the
/// unpickle, a descriptor each), and no setting buys that back. 32 tensors a batch take
/// ~10 ms there, 16 ~4 ms.
inline constexpr double kMinHandoverS = 0.002;

/// Wake-ups of each side a hand-over that no setting can shorten makes wait for a core: the
/// main process woken by the queue's message and by the answer for a tensor's descriptor, the
/// worker's thread that answers woken by the request, for a batch of one tensor or a few.
/// Where the processes' wait per CPU slice is known, the machine's share of a hand-over is
/// at most this many of each side's waits: a batch of many tensors wakes both sides many
/// times more, and that part fewer tensors buy back however busy the machine is.
inline constexpr double kHandoverWakeups = 4;

/// Stepped batches whose hand-over must have been measured (the worker's fetch end known, a
/// wait of 1 ms or more) before the hand-over is named: the quickest-tenth estimate of the
/// others is a floor for a fast loop's transfer, not a measurement of a slow one.
inline constexpr int64_t kMinMeasuredBatches = 30;

/// Share of the stepped batches that must have a measured hand-over: a loop where only a few
/// of its waits reach 1 ms hands most batches over quickly, and those few are noise.
inline constexpr double kMinMeasuredShare = 0.25;

struct Evidence {
  report::Rank rank;
  int loader = 0;
  std::string label;                 ///< "Loader 1", "Rank 0 · loader 1"
  double data_stall_fraction = 0;
  double handover_fraction = 0;      ///< of the loop: waits for batches already made
  double handover_ms = 0;            ///< per batch
  int64_t measured_batches = 0;
  std::optional<double> stall_beyond_fraction;  ///< waits for batches not yet made
  std::optional<double> consumer_step_ms;
  std::optional<double> fetch_ms;    ///< a worker's time to make a batch (getitem + collate)
  double measured_p50_ms = 0;        ///< the median measured hand-over
  /// Per batch: the main process or the workers queued for a CPU (the more of the two), and
  /// the machine's CPUs stolen by the hypervisor. Both are taken off before the thresholds.
  std::optional<double> queued_ms;
  std::optional<double> stolen_ms;
  std::optional<double> batch_bytes;
  std::optional<double> ready_batches_mean;
  std::string sharing_strategy;      ///< "" unknown (torch's default: file_descriptor)
  int num_workers = 0;
  bool pin_memory = false;
};
/// One per loader whose loop waits kHandoverFraction or more of its time, and kMinHandoverS
/// or more a batch, for batches already made (the typical batch's: the lower of the mean and
/// the median-based hand-over, less the processes' time queued for a CPU and the CPU time
/// stolen by a hypervisor), and whose workers could supply more batches
/// than the loop asks for (else they are the limit, and the wait would be there without any
/// hand-over: a worker busy in Python also delays its batches' hand-over, which then takes
/// up the wait the data-bound rules name).
std::vector<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::slow_handover
