// A worker using CPU in collate is slow or spinning, not deadlocked (worker_hang says so);
// unknown CPU does not clear it: the stack and the kernel wait already show the block.
#include "dldoctor_core/analyze/rules/collate_deadlock.hpp"

#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::collate_deadlock {

bool deadlocked_in_collate(const ProcessReading& r) noexcept {
  return r.place == Place::kCollate && !r.wait.empty() && !r.busy && !r.io_wait;
}

std::vector<Evidence> detect(const watchdog::HangSnapshot& snapshot,
                             const watchdog::HangContext& context) {
  std::vector<Suspect> suspects;
  for (const watchdog::ProcessCapture& p : snapshot.processes) {
    int loader = effective_loader(p, context);
    ProcessReading r = read_process(p, context.find(loader));
    if (deadlocked_in_collate(r)) suspects.push_back({&p, std::move(r), loader});
  }
  std::vector<Evidence> out;
  for (SuspectGroup& g : group_by_loader(std::move(suspects), context)) {
    Evidence e;
    e.rank = g.rank(snapshot.stalled_s);
    e.stalled_s = snapshot.stalled_s;
    const watchdog::LoaderContext* l = g.loader;
    e.forked_with_threads =
        l && l->start_method == "fork" && l->main_threads_at_fork && *l->main_threads_at_fork > 1;
    e.stuck = std::move(g);
    out.push_back(std::move(e));
  }
  return out;
}

report::Finding finding(const Evidence& e) {
  const watchdog::LoaderContext* loader = e.stuck.loader;
  const Suspect& s = e.stuck.primary();
  const watchdog::ProcessCapture& p = *s.process;

  report::Finding f = report::make_finding("collate_deadlock", s.loader, e.rank);
  std::string fn = loader && !loader->collate_fn.empty() ? loader->collate_fn : "default_collate";
  const watchdog::PyFrame* frame = s.reading.frame(p);
  if (frame && !frame->function.empty()) fn = frame->function;
  f.title = subject(p) + " is deadlocked inside collate_fn " + fn + ": waiting on a " +
            s.reading.wait + " for " + seconds(e.stalled_s) + " without using CPU";
  add_process_evidence(f, s, loader, e.stalled_s);
  f.add("collate_fn", loader && !loader->collate_fn.empty() ? loader->collate_fn
                                                            : std::string("default_collate"));
  if (e.stuck.suspects.size() > 1) f.add("stuck_workers", list_suspects(e.stuck.suspects));

  if (loader && !loader->start_method.empty()) f.add("start_method", loader->start_method);
  if (e.forked_with_threads) {
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
  return f;
}

}  // namespace dldoctor::analyze::collate_deadlock
