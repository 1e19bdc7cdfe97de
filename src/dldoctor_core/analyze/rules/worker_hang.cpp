// The main process takes batches in order, so one worker that never finishes its batch stops
// the whole loader, even while the others are idle.
#include "dldoctor_core/analyze/rules/worker_hang.hpp"

#include "dldoctor_core/analyze/rules/collate_deadlock.hpp"
#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::worker_hang {
namespace {

/// The stage a stuck process is reported in; "" when it is not stuck (idle, gone, the main
/// process waiting for the loader, or deadlocked in collate, which collate_deadlock reports).
std::string stage_of(const Suspect& s, const watchdog::LoaderContext* loader) {
  const ProcessReading& r = s.reading;
  const watchdog::ProcessCapture& p = *s.process;
  if (r.place == Place::kGone) return "";
  // D state is the cause wherever it happens: nothing in Python can end it.
  if (r.io_wait) return "io";
  if (collate_deadlock::deadlocked_in_collate(r)) return "";
  switch (r.place) {
    case Place::kGetitem:
      return "getitem";
    // Starting up with CPU progress (imports, unpickling the dataset under spawn) is slow,
    // not stuck: the watchdog looks again one timeout later.
    case Place::kWorkerInit:
      return r.busy ? "" : "worker_init";
    case Place::kCollate:
      return "collate";
    // Outside the fetch and making CPU progress (pickling a large batch into the queue,
    // seeding, lazy imports before the first batch): slow, not stuck.
    case Place::kSending:
    case Place::kOther:
      return p.worker >= 0 && !r.busy ? "other" : "";
    case Place::kUnknown: {
      // No stack: a worker is stuck only if it is known to owe a batch, and uses no CPU. A
      // worker without a stack handler that still makes CPU progress is starting up (a spawned
      // worker importing torch on a loaded machine takes seconds before the hooks exist).
      if (p.worker < 0 || loader == nullptr || r.busy) return "";
      if (holds_awaited_batch(s, loader)) return "other";
      auto it = loader->outstanding.find(p.worker);
      return it != loader->outstanding.end() && !it->second.empty() ? "other" : "";
    }
    default:
      return "";
  }
}

std::string where_title(const std::string& stage, const Suspect& s) {
  const watchdog::PyFrame* fr = s.reading.frame(*s.process);
  std::string fn = fr && !fr->function.empty() ? fr->function : "";
  if (stage == "getitem") return "stuck in the dataset's " + (fn.empty() ? "__getitem__" : fn);
  if (stage == "worker_init") {
    return "stuck before its first batch, in its startup" +
           (fn.empty() ? std::string() : " (" + fn + ")");
  }
  if (stage == "io") {
    std::string on = s.process->io_target.empty() ? "" : " on " + s.process->io_target;
    return "stuck in uninterruptible I/O (state D)" + on;
  }
  if (stage == "collate") return "stuck inside collate_fn" + (fn.empty() ? "" : " " + fn);
  return "stuck" + (fn.empty() ? std::string() : " in " + fn);
}

void set_fix_why(report::Finding& f, const std::string& stage, const Suspect& s) {
  const watchdog::PyFrame* fr = s.reading.frame(*s.process);
  std::string at = fr ? " (" + format_frame(*fr) + ")" : "";
  const char* timeout =
      " Set DataLoader(timeout=...) (e.g. 10x the normal time per batch) so a stuck worker "
      "raises an error naming it instead of hanging silently.";
  if (stage == "io") {
    std::string target =
        s.process->io_target.empty() ? "the dataset's storage" : s.process->io_target;
    f.fix = "Check " + target +
            ": a hung NFS/FUSE mount or a failing disk keeps the process in D state, where no "
            "timeout or signal reaches it. Look at `dmesg` and try `stat` on the path from a "
            "shell; copy the data to local disk, or mount network storage so reads fail "
            "instead of hanging (NFS: soft,timeo=...).";
    f.why =
        "A process in uninterruptible sleep (D) waits inside the kernel for a device or server "
        "to answer; nothing in Python can interrupt it, so the loader waits as long as the "
        "storage does.";
    return;
  }
  if (s.reading.busy) {
    f.fix = "The worker is using CPU but returns nothing" + at +
            ": look for a loop that never ends or work that grows without bound there (run one "
            "sample with num_workers=0 under a profiler)." +
            timeout;
    f.why =
        "The main process takes batches in order, so one worker that never finishes its batch "
        "stops the whole loader, even while the others are idle.";
    return;
  }
  // A stuck, idle worker: what to look for where it stopped, the frame inserted after `head`.
  struct Words {
    const char* stage;
    const char* head;
    const char* tail;
    const char* why;
  };
  static constexpr Words kWords[] = {
      {"getitem", "Find what __getitem__ waits for",
       " (an Event never set, a socket or pipe with no writer, a lock or queue shared with "
       "another process) and give that wait a timeout.",
       "The main process takes batches in order, so one worker stuck in the dataset stops the "
       "whole loader; without a timeout the DataLoader waits forever and says nothing."},
      {"worker_init", "Make the worker's startup finish",
       ": worker_init_fn and the dataset's setup in the worker must not wait on anything the "
       "main process or other workers provide; give such waits a timeout.",
       "A worker takes no indices until its startup finishes; the main process waits for its "
       "first batch forever."},
      {"collate", "collate_fn is not returning",
       ": find what it waits for and give that wait a timeout, or let collate_fn only combine "
       "the samples it is given.",
       "The main process takes batches in order, so one worker stuck in collate_fn stops the "
       "whole loader."},
      {"", "Find what the worker waits for", " and give that wait a timeout.",
       "The main process takes batches in order, so one stuck worker stops the whole loader."},
  };
  const Words* w = kWords;
  while (w->stage[0] != '\0' && stage != w->stage) ++w;  // the last one for any other stage
  f.fix = w->head + at + w->tail + timeout;
  f.why = w->why;
}

/// Whether a worker of `loader` used CPU over the stall: it is working, only slowly.
bool loader_workers_busy(const watchdog::HangSnapshot& snapshot,
                         const watchdog::HangContext& context, int loader) {
  for (const watchdog::ProcessCapture& p : snapshot.processes) {
    if (p.worker < 0 || p.loader != loader || p.gone) continue;
    if (read_process(p, context.find(loader)).busy) return true;
  }
  return false;
}

}  // namespace

std::vector<Evidence> detect(const watchdog::HangSnapshot& snapshot,
                             const watchdog::HangContext& context) {
  std::vector<Suspect> suspects;
  for (const watchdog::ProcessCapture& p : snapshot.processes) {
    int loader = effective_loader(p, context);
    Suspect s{&p, read_process(p, context.find(loader)), loader};
    if (stage_of(s, context.find(loader)).empty()) continue;
    suspects.push_back(std::move(s));
  }
  std::vector<Evidence> out;
  for (SuspectGroup& g : group_by_loader(std::move(suspects), context)) {
    Evidence e;
    e.rank = g.rank(snapshot.stalled_s);
    e.stage = stage_of(g.primary(), g.loader);
    e.stalled_s = snapshot.stalled_s;
    e.stuck = std::move(g);
    out.push_back(std::move(e));
  }
  return out;
}

report::Finding finding(const Evidence& e) {
  const Suspect& s = e.stuck.primary();
  report::Finding f = report::make_finding("worker_hang", s.loader, e.rank);
  f.title = subject(*s.process) + " is " + where_title(e.stage, s) + ": no batch for " +
            seconds(e.stalled_s);
  f.add("stage", e.stage);
  add_process_evidence(f, s, e.stuck.loader, e.stalled_s);
  if (!s.process->io_target.empty()) f.add("io_target", s.process->io_target);
  if (e.stage == "io") f.add("where", place_name(s.reading.place));
  if (s.reading.busy) f.add("busy", 1.0);
  if (e.stuck.suspects.size() > 1) f.add("stuck_workers", list_suspects(e.stuck.suspects));
  set_fix_why(f, e.stage, s);
  return f;
}

std::vector<Unexplained> detect_unexplained(const watchdog::HangSnapshot& snapshot,
                                            const watchdog::HangContext& context,
                                            std::set<int> explained) {
  std::vector<Unexplained> out;
  for (const watchdog::ProcessCapture& p : snapshot.processes) {
    if (p.worker >= 0) continue;
    int loader = effective_loader(p, context);
    if (read_process(p, context.find(loader)).place != Place::kInLoader) continue;
    std::vector<int> waiting;
    if (loader >= 0) {
      waiting.push_back(loader);
    } else {
      for (const watchdog::LoaderContext& l : context.loaders)
        if ((l.waiting_batch || l.waiting_worker) && iterated_by(l, p.pid))
          waiting.push_back(l.loader);
    }
    for (int l : waiting) {
      if (loader_workers_busy(snapshot, context, l)) continue;  // slow, not stuck
      if (!explained.insert(l).second) continue;
      Unexplained u;
      u.rank = {report::Severity::kCritical, report::Tier::kHang, snapshot.stalled_s};
      u.loader = l;
      u.context = context.find(l);
      u.stalled_s = snapshot.stalled_s;
      if (u.context && u.context->waiting_worker)
        for (const watchdog::ProcessCapture& w : snapshot.processes)
          if (w.worker == *u.context->waiting_worker && w.loader == l) u.waited_for.push_back(&w);
      out.push_back(std::move(u));
    }
  }
  return out;
}

report::Finding finding(const Unexplained& e) {
  const watchdog::LoaderContext* loader = e.context;
  report::Finding f = report::make_finding("worker_hang", e.loader, e.rank);
  f.add("stage", std::string("other"));
  f.add("stalled_s", e.stalled_s);
  std::string who = "no worker is visibly stuck";
  if (loader != nullptr && loader->waiting_worker) {
    int w = *loader->waiting_worker;
    f.add("worker", double(w));
    for (const watchdog::ProcessCapture* p : e.waited_for) {
      f.add("pid", double(p->pid));
      if (!p->state.empty()) f.add("state", p->state);
      if (!p->wchan.empty()) f.add("wchan", p->wchan);
      if (!p->syscall.empty()) f.add("syscall", p->syscall);
      if (!p->stack_note.empty()) f.add("stack_note", p->stack_note);
    }
    who = "it waits for worker " + std::to_string(w) + ", which shows no stuck stack";
  }
  if (loader != nullptr && loader->waiting_batch) {
    f.add("waiting_batch", double(*loader->waiting_batch));
  }
  f.title = "Loader " + std::to_string(e.loader) + " has produced no batch for " +
            seconds(e.stalled_s) + " and " + who;
  f.fix =
      "Set DataLoader(timeout=...) so the wait raises an error naming the worker; check the "
      "workers' stacks (py-spy dump --pid PID) and whether a pin_memory thread or a custom "
      "sampler blocks.";
  f.why =
      "The main process waits inside the DataLoader for a batch that no worker is producing; "
      "without a timeout it waits forever.";
  return f;
}

namespace {

/// Where a rank's main process is, outside its loader: its innermost frame, and whether the
/// stack is in a collective (torch.distributed) or in backward (where DDP all-reduces the
/// gradients with every rank).
struct RankWait {
  int rank = -1;
  int pid = 0;
  std::string where;  ///< "file.py:12 in fn" ("" no stack)
  bool collective = false;
};

std::optional<RankWait> waiting_rank(const ProcessCapture& p, const HangContext& context,
                                     int stuck_rank) {
  if (p.worker >= 0 || p.gone) return std::nullopt;
  int rank = -1;
  for (const LoaderContext& l : context.loaders)
    if (l.main_pid == p.pid && l.rank >= 0) rank = l.rank;
  if (rank < 0 || rank == stuck_rank) return std::nullopt;
  const ProcessReading r = read_process(p, context.find(effective_loader(p, context)));
  if (r.place == Place::kInLoader) return std::nullopt;  // its own loader: its own finding
  RankWait w;
  w.rank = rank;
  w.pid = p.pid;
  if (const PyFrame* top = r.top(p)) w.where = format_frame(*top);
  if (r.thread >= 0)
    for (const PyFrame& f : p.stacks[size_t(r.thread)].frames)
      if (f.file.find("torch/distributed/") != std::string::npos ||
          f.file.find("torch/autograd/") != std::string::npos)
        w.collective = true;
  return w;
}

}  // namespace

void note_waiting_ranks(std::vector<report::Finding>& findings,
                        const watchdog::HangSnapshot& snapshot,
                        const watchdog::HangContext& context) {
  for (report::Finding& f : findings) {
    if (f.severity != report::Severity::kCritical || f.loader < 0) continue;
    const LoaderContext* stuck = context.find(f.loader);
    if (stuck == nullptr || stuck->rank < 0) continue;
    std::vector<RankWait> waits;
    for (const ProcessCapture& p : snapshot.processes)
      if (auto w = waiting_rank(p, context, stuck->rank)) waits.push_back(*w);
    if (waits.empty()) continue;
    std::string ranks, frames;
    bool collective = true;
    for (const RankWait& w : waits) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(w.rank);
      frames += (frames.empty() ? "" : "; ") + ("rank " + std::to_string(w.rank)) + " (pid " +
                std::to_string(w.pid) + "): " + (w.where.empty() ? "no stack" : w.where);
      collective = collective && w.collective;
    }
    const std::string who = (waits.size() == 1 ? "rank " : "ranks ") + ranks;
    f.add("waiting_ranks", ranks);
    f.add("waiting_rank_frames", frames);
    f.title += "; " + who + " wait" + (waits.size() == 1 ? "s" : "") + " for it" +
               (collective ? " in the collective" : "");
    f.why += " " + who + (waits.size() == 1 ? " is" : " are") + " not stuck in " +
             (waits.size() == 1 ? "its" : "their") + " own loader: " +
             (collective ? "its main process waits in a collective (torch.distributed, or the "
                           "gradient all-reduce in backward) for rank " +
                               std::to_string(stuck->rank) +
                               ", which never arrives while its loader is stuck"
                         : "its main process is outside its loader (" + frames + ")") +
             ". Fix rank " + std::to_string(stuck->rank) + " and every rank moves again.";
  }
}

}  // namespace dldoctor::analyze::worker_hang
