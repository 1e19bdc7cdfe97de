// A loop that waits for batches already made: the time is in the transfer, not the workers.
#include "dldoctor_core/analyze/rules/slow_handover.hpp"

#include <algorithm>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::slow_handover {

namespace {
constexpr const char* kId = "slow_handover";
}  // namespace

std::vector<Evidence> detect(const JobView& job) {
  std::vector<Evidence> out;
  for (const LoaderView& l : job.loaders) {
    if (l.config.num_workers <= 0 || !judged(l)) continue;
    if (l.handover_measured < kMinMeasuredBatches ||
        double(l.handover_measured) < kMinMeasuredShare * double(l.stepped_batches))
      continue;
    const std::optional<double> handover = handover_typical_s(l);
    const std::optional<double> loop_s = loop_mean_s(l);
    if (!handover || !loop_s) continue;
    const double loop = *loop_s;
    const double h = std::min(*handover, *l.wait_mean_s);
    // Time per batch the machine, not the transfer, holds the hand-over up, counted against
    // it in full before the thresholds (a conservative cut, since these shares cover the
    // step too): on a busy machine a process woken for a ready batch, or the worker thread
    // that answers for its tensors, waits for a core (its run-queue delay: one tensor's
    // hand-over reads 2-3 ms beside two CPU burners); on a virtual machine the hypervisor
    // may not run its CPUs at all (steal), which no run queue shows.
    double queued =
        std::max(l.main.runq_delay_pct.value_or(0), l.fetchers.runq_delay_pct.value_or(0)) /
        100.0 * loop;
    // But the run queue over the whole loop is not all the hand-over's: a step that keeps
    // several threads of the main process busy queues them for the cores it fills itself,
    // and a batch of many tensors queues the processes once per wake-up of its own round
    // trips. What the machine takes from a hand-over is a few wake-ups, each as long as a
    // woken thread of that process waits for a core here.
    if (l.main.runq_wait_per_slice_us && l.fetchers.runq_wait_per_slice_us)
      queued = std::min(queued, kHandoverWakeups * 1e-6 *
                                    (*l.main.runq_wait_per_slice_us +
                                     *l.fetchers.runq_wait_per_slice_us));
    const double stolen = job.machine.cpu_steal_pct.value_or(0) / 100.0 * loop;
    const double net = std::max(0.0, h - queued - stolen);
    if (net / loop < kHandoverFraction || net < kMinHandoverS) continue;
    const double fraction = h / loop;
    const std::optional<FetchCapacity> capacity = fetch_capacity(l);
    if (!capacity || capacity->short_of_demand()) continue;

    Evidence e;
    e.loader = l.loader;
    const bool ranked = l.rank.known();
    e.label = loader_label(ranked ? l.rank.shown() : -1, ranked ? l.rank_loader : l.loader, true);
    e.data_stall_fraction = l.data_stall_fraction.value_or(0);
    e.handover_fraction = fraction;
    e.handover_ms = h * 1e3;
    if (l.main.runq_delay_pct || l.fetchers.runq_delay_pct) e.queued_ms = queued * 1e3;
    if (job.machine.cpu_steal_pct) e.stolen_ms = stolen * 1e3;
    e.measured_p50_ms = *l.handover_measured_p50_s * 1e3;
    e.measured_batches = l.handover_measured;
    e.stall_beyond_fraction = stall_beyond_handover(l);
    // The bottleneck when the transfer is the larger part of the wait; beside a loader
    // that cannot make its batches in time (the data-bound rules' finding), a partial cause.
    const bool main_part = fraction >= e.stall_beyond_fraction.value_or(0);
    e.rank = {main_part ? report::Severity::kCritical : report::Severity::kWarning,
              report::Tier::kMeasure, fraction};
    e.consumer_step_ms = *l.step_mean_s * 1e3;
    if (l.fetch_mean_s) e.fetch_ms = *l.fetch_mean_s * 1e3;
    e.batch_bytes = l.batch_bytes_mean;
    e.ready_batches_mean = l.ready_batches_mean;
    if (const RuntimeNote* rt = job.failures.runtime_of(l.loader))
      e.sharing_strategy = rt->sharing_strategy;
    e.num_workers = l.config.num_workers;
    e.pin_memory = l.config.pin_memory();
    out.push_back(std::move(e));
  }
  return out;
}

report::Finding finding(const Evidence& e) {
  report::Finding f = report::make_finding(kId, e.loader, e.rank);
  f.title = e.label + ": the loop waits " + num(100 * e.handover_fraction) +
            "% of its time for batches its workers have ready: handing one over to the main "
            "process takes " +
            num(e.handover_ms) + " ms";
  f.add("data_stall_fraction", e.data_stall_fraction);
  f.add("handover_fraction", e.handover_fraction);
  f.add("handover_ms", e.handover_ms);
  f.add("handover_measured_batches", double(e.measured_batches));
  if (e.stall_beyond_fraction) f.add("stall_beyond_handover_fraction", *e.stall_beyond_fraction);
  if (e.consumer_step_ms) f.add("consumer_step_ms", *e.consumer_step_ms);
  if (e.fetch_ms) f.add("fetch_mean_ms", *e.fetch_ms);
  f.add("handover_measured_p50_ms", e.measured_p50_ms);
  if (e.queued_ms) f.add("run_queue_ms_per_batch", *e.queued_ms);
  if (e.stolen_ms) f.add("cpu_steal_ms_per_batch", *e.stolen_ms);
  if (e.batch_bytes) f.add("batch_bytes", *e.batch_bytes);
  if (e.ready_batches_mean) f.add("ready_batches_mean", *e.ready_batches_mean);
  f.add("sharing_strategy", e.sharing_strategy.empty() ? std::string("unknown")
                                                       : e.sharing_strategy);
  f.add("num_workers", double(e.num_workers));

  const bool fd = e.sharing_strategy.empty() || e.sharing_strategy == "file_descriptor";
  const std::string fewer =
      "fewer, larger tensors in each batch: each tensor is handed over on its own, so stack a "
      "sample's fields into one tensor in __getitem__ (or collate_fn) and split them after "
      "the batch arrives";
  if (fd) {
    f.fix = "Call torch.multiprocessing.set_sharing_strategy('file_system') at the top of the "
            "script, before the DataLoader starts its workers: the main process then opens "
            "each tensor of a batch by name instead of asking the worker for it (torch's "
            "torch_shm_manager frees the segments once the job's processes have exited). And "
            "put " +
            fewer + ".";
  } else {
    f.fix = "Put " + fewer +
            ". More samples per batch also spread the cost (batch_size changes training: "
            "only where that is acceptable).";
  }
  if (e.pin_memory)
    f.fix += " With pin_memory=True the copy into pinned memory is part of each hand-over: "
             "measure the loop with pin_memory=False too.";

  f.why = "The main process waited " + num(100 * e.data_stall_fraction) +
          "% of the loop for batches, " + num(100 * e.handover_fraction) +
          "% for batches its workers had already made: measured on " +
          std::to_string(e.measured_batches) + " batches" +
          ", the part of each wait after its batch's fetch ended averaged " +
          num(e.handover_ms) +
          " ms. That time goes into moving the batch from its worker into the main process, "
          "not into making it, so more workers or a faster __getitem__ would not shorten it.";
  if (fd)
    f.why += " Under the file_descriptor sharing strategy (torch's default on Linux) each "
             "tensor is passed by a round trip to the worker that made it, answered by a "
             "thread of that worker that needs its GIL: the more tensors a batch holds, and "
             "the busier the worker is in Python, the longer the hand-over.";
  return f;
}

}  // namespace dldoctor::analyze::slow_handover
