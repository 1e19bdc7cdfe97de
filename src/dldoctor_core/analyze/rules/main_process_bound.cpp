// The honest answer is "not the loader": the finding says so and prescribes nothing for it.
#include "dldoctor_core/analyze/rules/main_process_bound.hpp"

#include <algorithm>

#include "dldoctor_core/analyze/data_bound.hpp"
#include "dldoctor_core/analyze/process_reading.hpp"
#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::main_process_bound {

std::optional<Evidence> detect(const JobView& job, const std::vector<report::Finding>& found) {
  if (!job.main_process.cpu_pct) return std::nullopt;
  const double wants_cpu =
      *job.main_process.cpu_pct + job.main_process.runq_delay_pct.value_or(0.0);
  if (wants_cpu < kMainBusyCpuPct) return std::nullopt;
  for (const report::Finding& f : found)
    if (f.id == "slow_handover") return std::nullopt;
  const LoaderView* worst = nullptr;  // the loader with the highest stall
  int judged_loaders = 0;
  for (const LoaderView& l : job.loaders) {
    if (!judged(l)) continue;
    // Judged by its wait for batches not yet made, as the verdict is: a ready batch's
    // hand-over is time the main process spends receiving it, not waiting for a worker.
    if (!keeps_up(l)) return std::nullopt;  // part of the job is data-bound: other rules speak
    ++judged_loaders;
    if (!worst || *l.data_stall_fraction > *worst->data_stall_fraction) worst = &l;
  }
  if (!worst) return std::nullopt;

  Evidence e;
  e.data_stall_fraction = *worst->data_stall_fraction;
  e.stall_beyond_handover_fraction = stall_beyond_handover(*worst);
  e.rank = {report::Severity::kInfo, report::Tier::kMeasure, 1.0 - e.data_stall_fraction};
  e.loader = judged_loaders == 1 ? worst->loader : -1;
  e.main_process_cpu_pct = *job.main_process.cpu_pct;
  if (worst->step_mean_s) e.consumer_step_ms = *worst->step_mean_s * 1e3;
  if (worst->wait_mean_s) e.wait_per_batch_ms = *worst->wait_mean_s * 1e3;
  e.consumer_batches_per_s = worst->batches_per_s;
  e.num_workers = worst->config.num_workers;
  e.main_pid = worst->config.main_pid;
  return e;
}

report::Finding finding(const Evidence& e) {
  report::Finding f = report::make_finding("main_process_bound", e.loader, e.rank);
  f.title = "The DataLoader keeps up: the main process (training step) is the limit";
  f.add("data_stall_fraction", e.data_stall_fraction);
  if (e.stall_beyond_handover_fraction)
    f.add("stall_beyond_handover_fraction", *e.stall_beyond_handover_fraction);
  f.add("main_process_cpu_pct", e.main_process_cpu_pct);
  if (e.consumer_step_ms) f.add("consumer_step_ms", *e.consumer_step_ms);
  if (e.wait_per_batch_ms) f.add("wait_per_batch_ms", *e.wait_per_batch_ms);
  if (e.consumer_batches_per_s) f.add("consumer_batches_per_s", *e.consumer_batches_per_s);
  f.add("num_workers", double(e.num_workers));
  f.fix =
      "Leave the DataLoader as it is: more workers, prefetching or pinning would not speed "
      "this job up. Speed up the step itself: profile the main process (torch.profiler, or "
      "py-spy top --pid " +
      std::to_string(e.main_pid) +
      ") and look for Python work that could move to the GPU, be vectorised, or be done "
      "less often (logging, metrics, .item() calls).";
  const double beyond = e.stall_beyond_handover_fraction.value_or(e.data_stall_fraction);
  f.why = "The main process waited for batches only " + num(e.data_stall_fraction * 100) +
          "% of the loop and used " + num(e.main_process_cpu_pct) +
          "% of a core: batches are ready before it asks for them, so the time goes into its "
          "own computation.";
  // Rounded as shown: a wait of 7.9% with 7.9% beyond the hand-over says nothing new.
  if (num(beyond * 100) != num(e.data_stall_fraction * 100))
    f.why += " Of that wait, " + num(beyond * 100) +
             "% of the loop was for batches not yet made; the rest went into handing ready "
             "batches over to it, which more workers or prefetching would not shorten.";
  return f;
}

std::vector<AtHang> detect_at_hang(const watchdog::HangSnapshot& snapshot,
                                   const watchdog::HangContext& context) {
  std::vector<AtHang> out;
  for (const watchdog::ProcessCapture& p : snapshot.processes) {
    if (p.worker >= 0) continue;
    int loader = effective_loader(p, context);
    ProcessReading r = read_process(p, context.find(loader));
    if (r.place != Place::kOutsideLoader) continue;
    // Info, not critical: it is not a loader problem.
    out.push_back({{report::Severity::kInfo, report::Tier::kHang, snapshot.stalled_s},
                   Suspect{&p, std::move(r), loader},
                   snapshot.stalled_s});
  }
  return out;
}

std::vector<watchdog::PyFrame> AtHang::top_frames() const {
  const auto& frames = main.process->stacks[size_t(main.reading.thread)].frames;
  return {frames.begin(),
          frames.begin() + std::ptrdiff_t(std::min(frames.size(), kTopFramesShown))};
}

report::Finding finding(const AtHang& e) {
  const watchdog::ProcessCapture& p = *e.main.process;
  const ProcessReading& r = e.main.reading;
  const std::vector<watchdog::PyFrame> frames = e.top_frames();
  std::string top;
  for (const watchdog::PyFrame& fr : frames) top += (top.empty() ? "" : " <- ") + format_frame(fr);
  report::Finding f = report::make_finding("main_process_bound", -1, e.rank);
  f.title =
      "The training loop itself is stuck, not the DataLoader: the main process has "
      "asked for no batch for " +
      seconds(e.stalled_s) + " and sits in " +
      (frames.empty() ? std::string("code outside the loader") : format_frame(frames.front()));
  f.add("pid", double(p.pid));
  f.add("stalled_s", e.stalled_s);
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
  return f;
}

}  // namespace dldoctor::analyze::main_process_bound
