#include "dldoctor_core/watchdog/stuck_main.hpp"

#include "dldoctor_core/watchdog/evidence.hpp"

namespace dldoctor::watchdog {

void rule_stuck_main(const HangSnapshot& snapshot, const HangContext& context,
                     std::vector<report::Finding>& out) {
  for (const ProcessCapture& p : snapshot.processes) {
    if (p.worker >= 0) continue;
    int loader = effective_loader(p, context);
    ProcessReading r = read_process(p, context.find(loader));
    if (r.place != Place::kOutsideLoader) continue;
    const auto& frames = p.stacks[size_t(r.thread)].frames;
    std::string top;
    for (size_t i = 0; i < frames.size() && i < kTopFramesShown; ++i) {
      top += (top.empty() ? "" : " <- ") + format_frame(frames[i]);
    }
    report::Finding f;
    f.id = "main_process_bound";
    f.severity = report::Severity::kInfo;
    f.loader = -1;
    f.tier = report::Tier::kHang;
    f.score = snapshot.stalled_s;
    f.title = "The training loop itself is stuck, not the DataLoader: the main process has "
              "asked for no batch for " + seconds(snapshot.stalled_s) + " and sits in " +
              (frames.empty() ? std::string("code outside the loader")
                              : format_frame(frames.front()));
    f.add("pid", double(p.pid));
    f.add("stalled_s", snapshot.stalled_s);
    f.add("top_frames", top);
    if (!frames.empty() && !frames.front().code.empty()) f.add("top_code", frames.front().code);
    if (!r.wait.empty()) f.add("wait", r.wait);
    if (!p.state.empty()) f.add("state", p.state);
    if (!p.wchan.empty()) f.add("wchan", p.wchan);
    if (!p.syscall.empty()) f.add("syscall", p.syscall);
    if (r.cpu_share) f.add("cpu_share_since_stall", *r.cpu_share);
    f.fix = std::string(r.busy ? "The main process is computing" : "The main process is blocked") +
            " in the code above, outside the DataLoader: debug that step (a collective waiting "
            "for another rank, a lock, input(), a device sync); no loader setting will help.";
    f.why =
        "The main process is not inside the DataLoader's __next__, so no batch is being asked "
        "for: the loader is idle because nothing consumes, not the other way round.";
    out.push_back(std::move(f));
  }
}

}  // namespace dldoctor::watchdog
