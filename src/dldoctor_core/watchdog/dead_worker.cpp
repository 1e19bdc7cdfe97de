#include "dldoctor_core/watchdog/dead_worker.hpp"

#include <signal.h>

#include "dldoctor_core/watchdog/evidence.hpp"

namespace dldoctor::watchdog {
namespace {

void set_fix_why(report::Finding& f, const ProcessCapture& p) {
  if (p.exit_signal && *p.exit_signal == SIGKILL) {
    f.fix =
        "Most often the kernel's OOM killer: check `dmesg | grep -i -e oom -e killed` or the "
        "memory cgroup's oom_kill count; lower num_workers, prefetch_factor or the batch size, "
        "or raise the memory limit.";
  } else if (p.exit_signal && *p.exit_signal == SIGBUS) {
    f.fix =
        "Shared memory (/dev/shm) is too small for the batches in flight: enlarge it (docker "
        "--shm-size=8g, or `mount -o remount,size=8G /dev/shm`) or lower prefetch_factor / "
        "num_workers.";
  } else if (p.exit_signal &&
             (*p.exit_signal == SIGSEGV || *p.exit_signal == SIGABRT || *p.exit_signal == SIGILL)) {
    f.fix =
        "A native crash in the worker (a C extension, or a library that is not fork-safe): run "
        "the loader with num_workers=0 to get the traceback in the main process, and try "
        "multiprocessing_context='spawn'.";
  } else if (p.exit_code && *p.exit_code != 0) {
    f.fix =
        "The worker exited with an error status: run the loader with num_workers=0 to see the "
        "exception in the main process.";
  } else {
    f.fix =
        "Run the loader with num_workers=0 to see the error in the main process, and check "
        "`dmesg` for the OOM killer.";
  }
  f.why =
      "A dead worker never returns the batches it was given, and the main process takes "
      "batches in order, so it waits for them.";
}

}  // namespace

void rule_dead_worker(const HangSnapshot& snapshot, const HangContext& context,
                      std::vector<report::Finding>& out) {
  std::vector<Suspect> dead;
  for (const ProcessCapture& p : snapshot.processes) {
    if (p.worker < 0) continue;
    if (!(p.gone || p.state == "Z" || p.state == "X" || p.state == "gone")) continue;
    dead.push_back({&p, read_process(p, context.find(p.loader)), p.loader});
  }
  for (const auto& group : by_loader(std::move(dead))) {
    const LoaderContext* loader = context.find(group.front().loader);
    const Suspect& s = primary(group, loader);
    const ProcessCapture& p = *s.process;
    report::Finding f;
    f.id = "worker_died";
    f.severity = report::Severity::kCritical;
    f.loader = s.loader;
    f.tier = holds_awaited_batch(s, loader) ? report::Tier::kHangAwaited : report::Tier::kHang;
    f.score = snapshot.stalled_s;
    std::string how = p.exit_signal ? " (killed by " + signal_name(*p.exit_signal) + ")"
                      : p.exit_code ? " (exit status " + std::to_string(*p.exit_code) + ")"
                                    : "";
    f.title = subject(p) + " (pid " + std::to_string(p.pid) + ") died" + how +
              " and the loader has waited " + seconds(snapshot.stalled_s) + " since";
    f.add("worker", double(p.worker));
    f.add("pid", double(p.pid));
    f.add("stalled_s", snapshot.stalled_s);
    f.add("state", p.state.empty() ? std::string("gone") : p.state);
    if (p.exit_code) f.add("exit_code", double(*p.exit_code));
    if (p.exit_signal) {
      f.add("exit_signal", double(*p.exit_signal));
      f.add("exit_signal_name", signal_name(*p.exit_signal));
    }
    if (loader != nullptr) {
      auto it = loader->outstanding.find(p.worker);
      if (it != loader->outstanding.end() && !it->second.empty()) {
        std::string held;
        for (int64_t b : it->second) held += (held.empty() ? "" : ", ") + std::to_string(b);
        f.add("held_batches", held);
      }
    }
    if (group.size() > 1) f.add("dead_workers", list_suspects(group));
    set_fix_why(f, p);
    out.push_back(std::move(f));
  }
}

}  // namespace dldoctor::watchdog
