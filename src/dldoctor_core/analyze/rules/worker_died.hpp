// worker_died: a DataLoader worker killed by a signal or exiting non-zero, with the reason.
// While the job runs (from the main process's death events and the side logs): the OOM
// killer (the memory cgroup's oom_kill counter rose, or memory sat at its limit), SIGSEGV in
// native code, a SIGKILL from outside, a plain exit code, and what the worker last wrote to
// stderr. At a hang: a worker the loader still waits on has exited or is a zombie.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "dldoctor_core/analyze/hang_evidence.hpp"
#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::analyze::worker_died {

/// A memory cgroup at this share of its limit at a SIGKILL is taken as the OOM killer even
/// when its counter could not be read: nothing else kills at that moment so often, and the
/// kernel reclaims down to the limit before it kills.
inline constexpr double kOomNearLimitFraction = 0.95;

/// Why a worker died, as its exit status and the memory counters tell.
enum class Reason {
  kOomKiller,
  kLikelyOom,
  kSigkill,
  kSegfault,
  kBusError,
  kOtherSignal,
  kExit,
  kUnknown
};
Reason reason_of(const WorkerDeath& d) noexcept;

/// The deaths of one reason (a crash loop kills the same way many times): the first carries
/// the figures.
struct Evidence {
  report::Rank rank;
  Reason reason = Reason::kUnknown;
  WorkerDeath first;
  int64_t deaths = 1;
  std::optional<int> num_workers;  ///< of the dead worker's loader, when known
};
/// One per reason, in the order the reasons first occurred.
std::vector<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

/// At a hang: the dead workers of one loader, the one holding the awaited batch first.
struct AtHang {
  report::Rank rank;
  SuspectGroup dead;
  double stalled_s = 0;
};
std::vector<AtHang> detect_at_hang(const watchdog::HangSnapshot& snapshot,
                                   const watchdog::HangContext& context);
report::Finding finding(const AtHang& e);

}  // namespace dldoctor::analyze::worker_died
