// worker_hang (seed cause 6): no batch for the hang timeout, and a live worker is stuck
// somewhere other than a lock in collate_fn (that is collate_deadlock): in the dataset
// (getitem), in its startup or worker_init_fn (worker_init), in uninterruptible I/O (io),
// elsewhere (other). Also the hang nothing else explains: the main process waits inside a
// loader whose workers show no stuck stack and use no CPU. Hang-time findings only.
#pragma once

#include <set>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/hang_evidence.hpp"
#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::analyze::worker_hang {

/// The stuck workers of one loader.
struct Evidence {
  report::Rank rank;
  SuspectGroup stuck;
  std::string stage;  ///< of the primary: "getitem", "worker_init", "io", "collate", "other"
  double stalled_s = 0;
};
std::vector<Evidence> detect(const watchdog::HangSnapshot& snapshot,
                             const watchdog::HangContext& context);
report::Finding finding(const Evidence& e);

/// A loader the main process waits in that no finding explains (stage "other").
struct Unexplained {
  report::Rank rank;
  int loader = -1;
  const watchdog::LoaderContext* context = nullptr;
  /// The captures of the worker given the awaited batch, when the context names it.
  std::vector<const watchdog::ProcessCapture*> waited_for;
  double stalled_s = 0;
};
/// The loaders a main process waits inside, not in `explained`, whose workers are idle
/// (workers using CPU are slow, not stuck). For classify_hang, after every other hang rule.
std::vector<Unexplained> detect_unexplained(const watchdog::HangSnapshot& snapshot,
                                            const watchdog::HangContext& context,
                                            std::set<int> explained);
report::Finding finding(const Unexplained& e);

/// A multi-rank job: each critical hang finding about a rank's loader says which other ranks
/// wait for it, with their main processes' frames (in the collective, when their stacks are
/// in torch.distributed or backward's all-reduce). Ranks stuck in their own loaders have
/// their own finding and are not named.
void note_waiting_ranks(std::vector<report::Finding>& findings,
                        const watchdog::HangSnapshot& snapshot,
                        const watchdog::HangContext& context);

}  // namespace dldoctor::analyze::worker_hang
