// The data-bound question shared by every rule, and the order the rules run in.
#include "dldoctor_core/analyze/rules.hpp"

#include "dldoctor_core/analyze/verdict.hpp"

namespace dldoctor::analyze {

namespace {
bool judged(const LoaderView& l) noexcept {
  return l.stepped_batches >= kMinSteadyBatches && l.data_stall_fraction &&
         l.loop_s >= kMinJudgedLoopS;
}
}  // namespace

bool stalled(const LoaderView& l) noexcept {
  return judged(l) && *l.data_stall_fraction >= kDataStallFraction;
}

bool keeps_up(const LoaderView& l) noexcept {
  return judged(l) && *l.data_stall_fraction < kDataStallFraction;
}

std::vector<report::Finding> run_rules(const JobView& job) {
  std::vector<report::Finding> out;
  rule_too_many_workers(job, out);
  rule_slow_getitem(job, out);
  rule_slow_collate(job, out);
  rule_io_bound(job, out);
  rule_main_process_bound(job, out);
  rule_thread_oversubscription(job, out);
  rule_cow_memory_growth(job, out);
  rule_worker_startup_cost(job, out);
  rule_straggler_worker(job, out);
  rule_shm_exhausted(job, out);
  rule_memory_pressure(job, out);
  // Equal failures keep this order: no room in /dev/shm, no GPU memory, no descriptor.
  rule_cuda_oom(job, out);
  rule_fd_limit(job, out);
  rule_worker_died(job, out);
  order_findings(out);
  return out;
}

}  // namespace dldoctor::analyze
