// How a report is decided, in one place for the streaming verdict, the final report and the
// hang report: findings ordered by severity, then tier (report::Tier), then score; the
// verdict is the top critical finding; a hang's diagnosis is merged with the run's findings.
#pragma once

#include <string>
#include <vector>

#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze {

/// What a report says: its findings, most important first, and its verdict.
struct Decision {
  std::vector<report::Finding> findings;
  /// The id of the most important critical finding; "healthy" when there is none; "unknown"
  /// when no DataLoader was seen and nothing hung (there was nothing to diagnose), or when
  /// it would be "healthy" from a run too short to judge.
  std::string verdict;
  /// Why the verdict is "unknown" ("" otherwise), one sentence for the report's notes.
  std::string note;
};

/// True when `a` is more important than `b`: higher severity, then higher tier, then higher
/// score.
bool ranks_before(const report::Finding& a, const report::Finding& b) noexcept;

/// Sorts most important first (stable: equal findings keep the rules' order).
void order_findings(std::vector<report::Finding>& findings);

/// The id of the most important critical finding, else "healthy".
std::string verdict(const std::vector<report::Finding>& findings);

/// The evidence name of the batches a worker could not send (shm_exhausted, fd_limit).
inline constexpr const char* kBatchesLost = "batches_lost";

/// The run's findings with a hang's diagnosis: a hang finding replaces the run's findings of
/// its id (it says more about the same thing) and keeps its hang tier, so it ranks above
/// them; when the hang has a critical finding, a critical run finding that lost batches is
/// the hang's cause and leads it (Tier::kLostBatchHang). Ordered.
std::vector<report::Finding> with_hang(std::vector<report::Finding> run,
                                       const std::vector<report::Finding>& hang);

/// The note of a verdict "unknown" because no DataLoader was seen.
inline constexpr const char* kNoLoaderNote =
    "no DataLoader was seen in this job: nothing to diagnose";

/// Orders `findings` and names the verdict; "unknown" when `any_loader` is false and
/// `hung` is false, and "unknown" instead of "healthy" when `not_healthy` says why the run
/// cannot be called healthy (data_bound's not_healthy_note(): too short to judge, or a loop
/// that waits on its loader for a cause no rule named): no evidence is not health.
Decision decide(std::vector<report::Finding> findings, bool any_loader, bool hung,
                const std::string& not_healthy = "");

}  // namespace dldoctor::analyze
