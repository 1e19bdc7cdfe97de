// A window too short to judge is neither stalled nor keeping up: no rule speaks of it.
#include "dldoctor_core/analyze/data_bound.hpp"

#include <cstdio>

namespace dldoctor::analyze {

bool judged(const LoaderView& l) noexcept {
  if (!l.data_stall_fraction || l.loop_s < kMinJudgedLoopS) return false;
  if (l.stepped_batches >= kMinSteadyBatches) return true;
  // No batch timed (attached without the hooks): the consumer's stack samples instead.
  return l.stepped_batches == 0 && l.stacks && l.stacks->main_samples >= kMinStackSamples;
}

bool stalled(const LoaderView& l) noexcept {
  return judged(l) && *l.data_stall_fraction >= kDataStallFraction;
}

bool keeps_up(const LoaderView& l) noexcept {
  return judged(l) && *l.data_stall_fraction < kDataStallFraction;
}

std::string too_short_to_judge(const JobView& job) {
  const LoaderView* closest = nullptr;
  for (const LoaderView& l : job.loaders) {
    if (judged(l)) return "";
    if (!closest || l.loop_s > closest->loop_s) closest = &l;
  }
  if (!closest) return "";
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "too short to judge: the training loop ran %lld measured batches in %.1f s; "
                "a verdict needs at least %lld batches and %.0f s of loop",
                (long long)closest->stepped_batches, closest->loop_s, (long long)kMinSteadyBatches,
                kMinJudgedLoopS);
  return buf;
}

}  // namespace dldoctor::analyze
