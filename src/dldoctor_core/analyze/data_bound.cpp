// A window too short to judge is neither stalled nor keeping up: no rule speaks of it.
#include "dldoctor_core/analyze/data_bound.hpp"

namespace dldoctor::analyze {

namespace {
bool judged(const LoaderView& l) noexcept {
  if (!l.data_stall_fraction || l.loop_s < kMinJudgedLoopS) return false;
  if (l.stepped_batches >= kMinSteadyBatches) return true;
  // No batch timed (attached without the hooks): the consumer's stack samples instead.
  return l.stepped_batches == 0 && l.stacks && l.stacks->main_samples >= kMinStackSamples;
}
}  // namespace

bool stalled(const LoaderView& l) noexcept {
  return judged(l) && *l.data_stall_fraction >= kDataStallFraction;
}

bool keeps_up(const LoaderView& l) noexcept {
  return judged(l) && *l.data_stall_fraction < kDataStallFraction;
}

}  // namespace dldoctor::analyze
