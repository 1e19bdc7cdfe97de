#include "dldoctor_core/analyze/worker_hang.hpp"

#include "dldoctor_core/analyze/collate_deadlock.hpp"
#include "dldoctor_core/watchdog/evidence.hpp"

namespace dldoctor::analyze {
namespace {

using watchdog::Place;
using watchdog::Suspect;

/// The stage a stuck process is reported in; "" when it is not stuck (idle, gone, the main
/// process waiting for the loader, or deadlocked in collate, which collate_deadlock reports).
std::string stage_of(const Suspect& s, const watchdog::LoaderContext* loader) {
  const watchdog::ProcessReading& r = s.reading;
  const watchdog::ProcessCapture& p = *s.process;
  if (r.place == Place::kGone) return "";
  // D state is the cause wherever it happens: nothing in Python can end it.
  if (r.io_wait) return "io";
  if (deadlocked_in_collate(r)) return "";
  switch (r.place) {
    case Place::kGetitem: return "getitem";
    // Starting up with CPU progress (imports, unpickling the dataset under spawn) is slow,
    // not stuck: the watchdog looks again one timeout later.
    case Place::kWorkerInit: return r.busy ? "" : "worker_init";
    case Place::kCollate: return "collate";
    case Place::kSending:
    case Place::kOther: return p.worker >= 0 ? "other" : "";
    case Place::kUnknown: {
      // No stack: a worker is stuck only if it is known to owe a batch.
      if (p.worker < 0 || loader == nullptr) return "";
      if (watchdog::holds_awaited_batch(s, loader)) return "other";
      auto it = loader->outstanding.find(p.worker);
      return it != loader->outstanding.end() && !it->second.empty() ? "other" : "";
    }
    default: return "";
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
  std::string at = fr ? " (" + watchdog::format_frame(*fr) + ")" : "";
  const char* timeout =
      " Set DataLoader(timeout=...) (e.g. 10x the normal time per batch) so a stuck worker "
      "raises an error naming it instead of hanging silently.";
  if (stage == "io") {
    std::string target = s.process->io_target.empty() ? "the dataset's storage"
                                                       : s.process->io_target;
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
            "sample with num_workers=0 under a profiler)." + timeout;
    f.why =
        "The main process takes batches in order, so one worker that never finishes its batch "
        "stops the whole loader, even while the others are idle.";
    return;
  }
  if (stage == "getitem") {
    f.fix = "Find what __getitem__ waits for" + at +
            " (an Event never set, a socket or pipe with no writer, a lock or queue shared "
            "with another process) and give that wait a timeout." + timeout;
    f.why =
        "The main process takes batches in order, so one worker stuck in the dataset stops the "
        "whole loader; without a timeout the DataLoader waits forever and says nothing.";
  } else if (stage == "worker_init") {
    f.fix = "Make the worker's startup finish" + at +
            ": worker_init_fn and the dataset's setup in the worker must not wait on anything "
            "the main process or other workers provide; give such waits a timeout." +
            timeout;
    f.why =
        "A worker takes no indices until its startup finishes; the main process waits for its "
        "first batch forever.";
  } else if (stage == "collate") {
    f.fix = "collate_fn is not returning" + at +
            ": find what it waits for and give that wait a timeout, or let collate_fn only "
            "combine the samples it is given." + timeout;
    f.why =
        "The main process takes batches in order, so one worker stuck in collate_fn stops the "
        "whole loader.";
  } else {
    f.fix = "Find what the worker waits for" + at + " and give that wait a timeout." + timeout;
    f.why =
        "The main process takes batches in order, so one stuck worker stops the whole loader.";
  }
}

}  // namespace

void rule_worker_hang(const watchdog::HangSnapshot& snapshot, const watchdog::HangContext& context,
                      std::vector<report::Finding>& out) {
  std::vector<Suspect> suspects;
  std::vector<std::string> stages;
  for (const watchdog::ProcessCapture& p : snapshot.processes) {
    int loader = watchdog::effective_loader(p, context);
    Suspect s{&p, watchdog::read_process(p, context.find(loader)), loader};
    if (stage_of(s, context.find(loader)).empty()) continue;
    suspects.push_back(std::move(s));
  }
  for (const auto& group : watchdog::by_loader(std::move(suspects))) {
    const watchdog::LoaderContext* loader = context.find(group.front().loader);
    const Suspect& s = watchdog::primary(group, loader);
    std::string stage = stage_of(s, loader);

    report::Finding f;
    f.id = "worker_hang";
    f.severity = report::Severity::kCritical;
    f.loader = s.loader;
    f.tier = watchdog::holds_awaited_batch(s, loader) ? report::Tier::kHangAwaited
                                                      : report::Tier::kHang;
    f.score = snapshot.stalled_s;
    f.title = watchdog::subject(*s.process) + " is " + where_title(stage, s) + ": no batch for " +
              watchdog::seconds(snapshot.stalled_s);
    f.add("stage", stage);
    watchdog::add_process_evidence(f, s, loader, snapshot.stalled_s);
    if (!s.process->io_target.empty()) f.add("io_target", s.process->io_target);
    if (stage == "io") f.add("where", watchdog::place_name(s.reading.place));
    if (s.reading.busy) f.add("busy", 1.0);
    if (group.size() > 1) f.add("stuck_workers", watchdog::list_suspects(group));
    set_fix_why(f, stage, s);
    out.push_back(std::move(f));
  }
}

report::Finding unexplained_loader_hang(const watchdog::HangSnapshot& snapshot,
                                        const watchdog::HangContext& context, int loader_id) {
  const watchdog::LoaderContext* loader = context.find(loader_id);
  report::Finding f;
  f.id = "worker_hang";
  f.severity = report::Severity::kCritical;
  f.loader = loader_id;
  f.tier = report::Tier::kHang;
  f.score = snapshot.stalled_s;
  f.add("stage", std::string("other"));
  f.add("stalled_s", snapshot.stalled_s);
  std::string who = "no worker is visibly stuck";
  if (loader != nullptr && loader->waiting_worker) {
    int w = *loader->waiting_worker;
    f.add("worker", double(w));
    for (const watchdog::ProcessCapture& p : snapshot.processes) {
      if (p.worker == w && p.loader == loader_id) {
        f.add("pid", double(p.pid));
        if (!p.state.empty()) f.add("state", p.state);
        if (!p.wchan.empty()) f.add("wchan", p.wchan);
        if (!p.syscall.empty()) f.add("syscall", p.syscall);
        if (!p.stack_note.empty()) f.add("stack_note", p.stack_note);
      }
    }
    who = "it waits for worker " + std::to_string(w) + ", which shows no stuck stack";
  }
  if (loader != nullptr && loader->waiting_batch) {
    f.add("waiting_batch", double(*loader->waiting_batch));
  }
  f.title = "Loader " + std::to_string(loader_id) + " has produced no batch for " +
            watchdog::seconds(snapshot.stalled_s) + " and " + who;
  f.fix =
      "Set DataLoader(timeout=...) so the wait raises an error naming the worker; check the "
      "workers' stacks (py-spy dump --pid PID) and whether a pin_memory thread or a custom "
      "sampler blocks.";
  f.why =
      "The main process waits inside the DataLoader for a batch that no worker is producing; "
      "without a timeout it waits forever.";
  return f;
}

}  // namespace dldoctor::analyze
