// Evidence shared by the hang rules: the same names for the same facts in every finding
// (worker, pid, stalled_s, frame, state, wchan, syscall ...), and the choice of which stuck
// process a finding is about.
#pragma once

#include <string>
#include <vector>

#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"
#include "dldoctor_core/watchdog/process_reading.hpp"

namespace dldoctor::watchdog {

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

/// "12.5" style seconds for titles (whole seconds above 10 s).
std::string seconds(double s);

}  // namespace dldoctor::watchdog
