// A window too short to judge is neither stalled nor keeping up: no rule speaks of it.
#include "dldoctor_core/analyze/data_bound.hpp"

#include <algorithm>
#include <cstdio>

#include "dldoctor_core/analyze/text.hpp"

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

namespace {
/// Per stepped batch of `l`: `measured_s` in all for the batches whose hand-over was
/// measured, the quickest waits (handover_s) for the rest.
std::optional<double> per_stepped_batch(const LoaderView& l, double measured_s) noexcept {
  if (!l.handover_s || l.stepped_batches <= 0) return std::nullopt;
  const double n = double(l.stepped_batches);
  const double measured = std::min(double(l.handover_measured), n);
  return (measured_s + *l.handover_s * (n - measured)) / n;
}
}  // namespace

std::optional<double> handover_mean_s(const LoaderView& l) noexcept {
  return per_stepped_batch(l, l.handover_measured_s);
}

std::optional<double> handover_typical_s(const LoaderView& l) noexcept {
  const std::optional<double> mean = handover_mean_s(l);
  if (!mean || !l.handover_measured_p50_s) return std::nullopt;
  const double measured = std::min(double(l.handover_measured), double(l.stepped_batches));
  return std::min(*mean, *per_stepped_batch(l, *l.handover_measured_p50_s * measured));
}

std::optional<double> loop_mean_s(const LoaderView& l) noexcept {
  if (!l.wait_mean_s || !l.step_mean_s) return std::nullopt;
  const double loop = *l.wait_mean_s + *l.step_mean_s;
  return loop > 0 ? std::optional<double>(loop) : std::nullopt;
}

std::optional<double> stall_beyond_handover(const LoaderView& l) noexcept {
  const std::optional<double> handover = handover_mean_s(l);
  const std::optional<double> loop = loop_mean_s(l);
  if (!handover || !loop) return std::nullopt;
  return std::max(0.0, *l.wait_mean_s - *handover) / *loop;
}

bool keeps_up(const LoaderView& l) noexcept {
  return judged(l) &&
         stall_beyond_handover(l).value_or(*l.data_stall_fraction) < kDataStallFraction;
}

std::string unexplained_stall(const JobView& job) {
  const LoaderView* worst = nullptr;
  double worst_share = 0;
  for (const LoaderView& l : job.loaders) {
    const std::optional<double> share = stall_beyond_handover(l);
    if (!stalled(l) || !share || *share < kDataStallFraction || *share <= worst_share) continue;
    worst = &l;
    worst_share = *share;
  }
  if (!worst) return "";
  const bool ranked = worst->rank.known();  // then its number among its rank's loaders
  const std::string who = loader_label(ranked ? worst->rank.shown() : -1,
                                       ranked ? worst->rank_loader : worst->loader);
  char buf[400];
  std::snprintf(buf, sizeof buf,
                "not healthy, cause not named: the loop of %s waits for batches not yet made "
                "%.0f%% of its time (%.0f%% in all, less the %.1f ms a ready batch takes to "
                "hand over; a loader that keeps up: under %.0f%%), and no rule found one cause "
                "for it",
                who.c_str(), 100 * worst_share, 100 * *worst->data_stall_fraction,
                1e3 * handover_mean_s(*worst).value_or(0), 100 * kDataStallFraction);
  return buf;
}

std::string not_healthy_note(const JobView& job) {
  std::string why = too_short_to_judge(job);
  return why.empty() ? unexplained_stall(job) : why;
}

}  // namespace dldoctor::analyze
