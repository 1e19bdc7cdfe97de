#include "dldoctor_core/analyze/collate_deadlock.hpp"

#include "dldoctor_core/watchdog/evidence.hpp"

namespace dldoctor::analyze {

using watchdog::Place;
using watchdog::Suspect;

bool deadlocked_in_collate(const watchdog::ProcessReading& r) noexcept {
  // A worker using CPU in collate is slow or spinning, not deadlocked (worker_hang says so);
  // unknown CPU does not clear it, the stack and the kernel wait already show the block.
  return r.place == Place::kCollate && !r.wait.empty() && !r.busy && !r.io_wait;
}

void rule_collate_deadlock(const watchdog::HangSnapshot& snapshot,
                           const watchdog::HangContext& context,
                           std::vector<report::Finding>& out) {
  std::vector<Suspect> suspects;
  for (const watchdog::ProcessCapture& p : snapshot.processes) {
    int loader = watchdog::effective_loader(p, context);
    watchdog::ProcessReading r = watchdog::read_process(p, context.find(loader));
    if (deadlocked_in_collate(r)) suspects.push_back({&p, std::move(r), loader});
  }
  for (const auto& group : watchdog::by_loader(std::move(suspects))) {
    const watchdog::LoaderContext* loader = context.find(group.front().loader);
    const Suspect& s = watchdog::primary(group, loader);
    const watchdog::ProcessCapture& p = *s.process;

    report::Finding f;
    f.id = "collate_deadlock";
    f.severity = report::Severity::kCritical;
    f.loader = s.loader;
    f.tier = watchdog::holds_awaited_batch(s, loader) ? report::Tier::kHangAwaited
                                                      : report::Tier::kHang;
    f.score = snapshot.stalled_s;
    std::string fn = loader && !loader->collate_fn.empty() ? loader->collate_fn : "default_collate";
    const watchdog::PyFrame* frame = s.reading.frame(p);
    if (frame && !frame->function.empty()) fn = frame->function;
    f.title = watchdog::subject(p) + " is deadlocked inside collate_fn " + fn + ": waiting on a " +
              s.reading.wait + " for " + watchdog::seconds(snapshot.stalled_s) +
              " without using CPU";
    watchdog::add_process_evidence(f, s, loader, snapshot.stalled_s);
    f.add("collate_fn", loader && !loader->collate_fn.empty() ? loader->collate_fn
                                                               : std::string("default_collate"));
    if (group.size() > 1) f.add("stuck_workers", watchdog::list_suspects(group));

    bool forked_with_threads = loader && loader->start_method == "fork" &&
                               loader->main_threads_at_fork && *loader->main_threads_at_fork > 1;
    if (loader && !loader->start_method.empty()) f.add("start_method", loader->start_method);
    if (forked_with_threads) {
      f.add("main_threads_at_fork", double(*loader->main_threads_at_fork));
      std::string names;
      for (const std::string& n : loader->main_thread_names_at_fork) {
        names += (names.empty() ? "" : ", ") + n;
      }
      if (!names.empty()) f.add("main_thread_names_at_fork", names);
      f.fix =
          "Start the workers with DataLoader(..., multiprocessing_context='spawn') (or "
          "'forkserver') so they do not inherit locks held by the main process's other "
          "threads; or create the lock collate_fn takes inside the worker (in worker_init_fn) "
          "instead of sharing the main process's, and never hold it while the DataLoader "
          "starts its workers. Add DataLoader(timeout=...) so a stuck worker raises an error "
          "instead of hanging silently.";
      f.why =
          "fork copies only the thread that calls it: a lock another thread of the main "
          "process held at that moment is copied into the worker locked, and no thread there "
          "will ever release it, so the first collate that takes it waits forever. The main "
          "process takes batches in order, so the whole loader stops.";
    } else {
      f.fix =
          "Do not wait on locks, queues or events inside collate_fn: let it combine only the "
          "samples it is given. If it must synchronize, give the wait a timeout "
          "(lock.acquire(timeout=...), queue.get(timeout=...)) and make sure whoever must "
          "release or fill it is still running; DataLoader(timeout=...) turns a silent hang "
          "into an error that names the worker.";
      f.why =
          "A collate_fn that waits on something no running thread or process will release "
          "blocks its worker forever, and the main process waits for that worker's batch in "
          "order, so the whole loader stops.";
    }
    out.push_back(std::move(f));
  }
}

}  // namespace dldoctor::analyze
