#include "dldoctor_core/watchdog/classify.hpp"

#include <algorithm>
#include <set>

#include "dldoctor_core/analyze/collate_deadlock.hpp"
#include "dldoctor_core/analyze/verdict.hpp"
#include "dldoctor_core/analyze/worker_hang.hpp"
#include "dldoctor_core/watchdog/dead_worker.hpp"
#include "dldoctor_core/watchdog/process_reading.hpp"
#include "dldoctor_core/watchdog/stuck_main.hpp"

namespace dldoctor::watchdog {

namespace {
/// Whether a worker of `loader` used CPU over the stall: it is working, only slowly.
bool loader_workers_busy(const HangSnapshot& snapshot, const HangContext& context, int loader) {
  for (const ProcessCapture& p : snapshot.processes) {
    if (p.worker < 0 || p.loader != loader || p.gone) continue;
    if (read_process(p, context.find(loader)).busy) return true;
  }
  return false;
}
}  // namespace

std::vector<report::Finding> classify_hang(const HangSnapshot& snapshot,
                                           const HangContext& context) {
  std::vector<report::Finding> out;
  analyze::rule_collate_deadlock(snapshot, context, out);
  rule_dead_worker(snapshot, context, out);
  analyze::rule_worker_hang(snapshot, context, out);

  std::set<int> explained;
  for (const report::Finding& f : out) explained.insert(f.loader);
  if (out.empty()) rule_stuck_main(snapshot, context, out);
  // The main process waits inside a loader no finding explains: still a hang, say so.
  for (const ProcessCapture& p : snapshot.processes) {
    if (p.worker >= 0) continue;
    int loader = effective_loader(p, context);
    if (read_process(p, context.find(loader)).place != Place::kInLoader) continue;
    std::vector<int> waiting;
    if (loader >= 0) {
      waiting.push_back(loader);
    } else {
      for (const LoaderContext& l : context.loaders) {
        if (l.waiting_batch || l.waiting_worker) waiting.push_back(l.loader);
      }
    }
    for (int l : waiting) {
      if (loader_workers_busy(snapshot, context, l)) continue;  // slow, not stuck
      if (explained.insert(l).second) {
        out.push_back(analyze::unexplained_loader_hang(snapshot, context, l));
      }
    }
  }
  analyze::order_findings(out);
  return out;
}

}  // namespace dldoctor::watchdog
