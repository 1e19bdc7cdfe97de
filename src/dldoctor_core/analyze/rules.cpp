// The order the rules run in is the tie-break of equal findings: the most fundamental first
// (the CPUs, then the fetch, then memory and failures).
#include "dldoctor_core/analyze/rules.hpp"

#include <optional>
#include <set>

#include "dldoctor_core/analyze/process_reading.hpp"
#include "dldoctor_core/analyze/rules/collate_deadlock.hpp"
#include "dldoctor_core/analyze/rules/cow_memory_growth.hpp"
#include "dldoctor_core/analyze/rules/cuda_oom.hpp"
#include "dldoctor_core/analyze/rules/cuda_oom_risk.hpp"
#include "dldoctor_core/analyze/rules/fd_limit.hpp"
#include "dldoctor_core/analyze/rules/io_bound.hpp"
#include "dldoctor_core/analyze/rules/loader_error.hpp"
#include "dldoctor_core/analyze/rules/main_process_bound.hpp"
#include "dldoctor_core/analyze/rules/pinned_memory_pressure.hpp"
#include "dldoctor_core/analyze/rules/ram_pressure.hpp"
#include "dldoctor_core/analyze/rules/shm_exhausted.hpp"
#include "dldoctor_core/analyze/rules/slow_collate.hpp"
#include "dldoctor_core/analyze/rules/slow_getitem.hpp"
#include "dldoctor_core/analyze/rules/slow_handover.hpp"
#include "dldoctor_core/analyze/rules/straggler_rank.hpp"
#include "dldoctor_core/analyze/rules/straggler_worker.hpp"
#include "dldoctor_core/analyze/rules/thread_oversubscription.hpp"
#include "dldoctor_core/analyze/rules/too_many_workers.hpp"
#include "dldoctor_core/analyze/rules/uneven_worker_split.hpp"
#include "dldoctor_core/analyze/rules/worker_died.hpp"
#include "dldoctor_core/analyze/rules/worker_hang.hpp"
#include "dldoctor_core/analyze/rules/worker_startup_cost.hpp"
#include "dldoctor_core/analyze/verdict.hpp"

namespace dldoctor::analyze {

namespace {

// Each rule detects (numbers -> its Evidence) and words (Evidence -> a finding); `finding` is
// found by argument-dependent lookup in the rule's own namespace.
template <class Evidence>
void emit(std::vector<report::Finding>& out, const std::optional<Evidence>& e) {
  if (e) out.push_back(finding(*e));
}
template <class Evidence>
void emit(std::vector<report::Finding>& out, const std::vector<Evidence>& es) {
  for (const Evidence& e : es) out.push_back(finding(e));
}

}  // namespace

std::vector<report::Finding> run_rules(const JobView& job) {
  std::vector<report::Finding> out;
  emit(out, too_many_workers::detect(job));
  emit(out, uneven_worker_split::detect(job));
  emit(out, slow_getitem::detect(job));
  emit(out, slow_collate::detect(job));
  emit(out, io_bound::detect(job));
  emit(out, slow_handover::detect(job));
  emit(out, main_process_bound::detect(job, out));
  emit(out, thread_oversubscription::detect(job));
  emit(out, cow_memory_growth::detect(job));
  emit(out, worker_startup_cost::detect(job));
  emit(out, straggler_worker::detect(job));
  emit(out, shm_exhausted::detect(job));
  emit(out, pinned_memory_pressure::detect_unused(job));
  emit(out, pinned_memory_pressure::detect(job));
  emit(out, ram_pressure::detect(job));
  // Equal failures keep this order: no room in /dev/shm, no GPU memory, no descriptor.
  emit(out, cuda_oom::detect(job));
  emit(out, cuda_oom_risk::detect(job));
  emit(out, fd_limit::detect(job));
  emit(out, worker_died::detect(job));
  emit(out, loader_error::detect(job));
  // Last: the rank that gates a data-parallel job, named with what the rules above found
  // about its loader.
  emit(out, straggler_rank::detect(job, out));
  order_findings(out);
  return out;
}

std::vector<report::Finding> classify_hang(const watchdog::HangSnapshot& snapshot,
                                           const watchdog::HangContext& context) {
  std::vector<report::Finding> out;
  emit(out, collate_deadlock::detect(snapshot, context));
  emit(out, worker_died::detect_at_hang(snapshot, context));
  emit(out, worker_hang::detect(snapshot, context));
  std::set<int> explained;
  for (const report::Finding& f : out) explained.insert(f.loader);
  if (out.empty()) emit(out, main_process_bound::detect_at_hang(snapshot, context));
  // The main process waits inside a loader no finding explains: still a hang, say so.
  emit(out, worker_hang::detect_unexplained(snapshot, context, std::move(explained)));
  worker_hang::note_waiting_ranks(out, snapshot, context);
  order_findings(out);
  return out;
}

watchdog::HangJudgement judge_hang(const watchdog::HangSnapshot& snapshot,
                                   const watchdog::HangContext& context) {
  watchdog::HangJudgement j;
  j.findings = classify_hang(snapshot, context);
  if (j.findings.empty()) {
    for (const watchdog::ProcessCapture& p : snapshot.processes)
      if (p.worker < 0 &&
          read_process(p, context.find(effective_loader(p, context))).place == Place::kShuttingDown)
        j.progressing = true;
  }
  return j;
}

}  // namespace dldoctor::analyze
