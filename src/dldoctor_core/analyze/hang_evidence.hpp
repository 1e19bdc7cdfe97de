// Evidence shared by the hang rules: the same names for the same facts in every finding
// (worker, pid, stalled_s, frame, state, wchan, syscall ...), the choice of which stuck
// process a finding is about, and where it ranks (the awaited batch's holder first).
#pragma once

#include <string>
#include <vector>

#include "dldoctor_core/analyze/process_reading.hpp"
#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::analyze {

/// A process a rule picked, with its reading.
struct Suspect {
  const ProcessCapture* process = nullptr;
  ProcessReading reading;
  int loader = -1;  ///< effective loader (see effective_loader)
};

/// Adds worker, pid, stalled_s, frame, top_frame, wait, state, wchan, syscall,
/// cpu_share_since_stall, held_batches and waiting_batch (each only when known).
void add_process_evidence(report::Finding& f, const Suspect& s, const LoaderContext* loader,
                          double stalled_s);

/// "3, 7": the batches `worker` was given and has not returned ("" none or unknown).
std::string held_batches(const LoaderContext* loader, int worker);

/// True when the main process waits for a batch that `s`'s worker was given.
bool holds_awaited_batch(const Suspect& s, const LoaderContext* loader) noexcept;

/// The suspect a finding is about: the one holding the awaited batch, else the first.
const Suspect& primary(const std::vector<Suspect>& suspects, const LoaderContext* loader);

/// "1 (pid 10), 2 (pid 11)" for evidence listing every suspect.
std::string list_suspects(const std::vector<Suspect>& suspects);

/// Groups suspects by loader, in loader order.
std::vector<std::vector<Suspect>> by_loader(std::vector<Suspect> suspects);

/// "Worker 1 of loader 0" / "The main process" (capitalized, for the start of a title).
std::string subject(const ProcessCapture& p);

/// The report's tier for a hang finding about `s`: kHangAwaited when it holds the batch the
/// main process waits for, else kHang.
report::Tier hang_tier(const Suspect& s, const LoaderContext* loader) noexcept;

/// The suspects of one loader, and the one its finding is about (primary()).
struct SuspectGroup {
  std::vector<Suspect> suspects;  ///< in capture order; pointers into the snapshot
  size_t primary_index = 0;
  const LoaderContext* loader = nullptr;
  const Suspect& primary() const noexcept { return suspects[primary_index]; }
  /// The finding's rank: critical, the awaited batch's holder first, then seconds stalled.
  report::Rank rank(double stalled_s) const noexcept;
};
/// One group per loader, in loader order.
std::vector<SuspectGroup> group_by_loader(std::vector<Suspect> suspects,
                                          const HangContext& context);

}  // namespace dldoctor::analyze
