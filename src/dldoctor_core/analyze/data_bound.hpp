// The first question of every analysis: is this loader data-bound at all? A loader is
// judged only over enough batches (or, attached without hooks, stack samples) and loop time, and it
// stalls the loop when the main process waits for batches at least kDataStallFraction of it
// (DESIGN.md section 4).
#pragma once

#include <cstdint>
#include <string>

#include "dldoctor_core/analyze/view.hpp"

namespace dldoctor::analyze {

/// Share of the loop the main process may spend waiting for batches before the loader
/// counts as a bottleneck. Below it the loader keeps up: timer noise and the occasional
/// slow batch already cost a few percent, and no change to the loader could buy back more
/// than that (DESIGN.md section 4).
inline constexpr double kDataStallFraction = 0.05;

/// The share of a loader's waits taken as its hand-over cost (LoaderView::handover_s): the
/// quickest tenth, batches that were ready when the consumer asked. Lower would read the
/// noise of a few lucky batches; the median would call a loop that waits for every batch
/// one that waits for none.
inline constexpr double kHandoverQuantile = 0.1;

/// Consumer steps a window needs before it is judged: fewer give no stable mean, and the
/// first batches of an epoch are still warming up (page cache, allocator, JIT).
inline constexpr int64_t kMinSteadyBatches = 5;

/// Loop time (wait + step) a window needs before it is judged: a shorter one is a start-up
/// transient (workers still filling their prefetch queues, a cold page cache), and a
/// streaming verdict named from it would cry wolf.
inline constexpr double kMinJudgedLoopS = 2.0;

/// Samples of the consumer thread a window needs to be judged when no batch was timed
/// (attach: the stall is the share of stack samples inside the loader). At 20 samples the
/// share's standard error is at most 11 points, and the default 10 s window at 20 Hz takes
/// 200; fewer come only from a window cut short, which says nothing.
inline constexpr int64_t kMinStackSamples = 20;

/// Enough consumer steps (kMinSteadyBatches) and loop time (kMinJudgedLoopS) to judge.
bool judged(const LoaderView& l) noexcept;
/// Enough batches to judge, and the loop waits on the loader at least kDataStallFraction.
bool stalled(const LoaderView& l) noexcept;
/// Enough batches to judge, and the loop waits for batches not yet made (stall_beyond_handover,
/// or the whole stall where the hand-over is unknown) less than kDataStallFraction: the workers
/// make the batches in time, whatever their hand-over costs.
bool keeps_up(const LoaderView& l) noexcept;

/// Why `job` is too short to call healthy: "" when a loader of it has enough batches and loop
/// time to judge (or it has no loader), else a sentence with the figures of the loader that
/// came closest and what a verdict needs.
std::string too_short_to_judge(const JobView& job);

/// The loop's time per stepped batch, wait + step. Empty when either is unknown or it is 0.
std::optional<double> loop_mean_s(const LoaderView& l) noexcept;

/// What handing over a batch cost `l`'s loop, per stepped batch: the part of a real wait
/// after its batch was made where that was measured (handover_measured), its quickest waits
/// (handover_s) for the rest. Empty when unknown.
std::optional<double> handover_mean_s(const LoaderView& l) noexcept;

/// The hand-over a batch of `l` typically takes, per stepped batch: as handover_mean_s with
/// the measured ones at their median (handover_measured_p50_s), unless the mean is lower. A
/// host that stalls the main process now and then stretches a few waits by tens of
/// milliseconds; the mean then reads a slow hand-over that the median does not. Empty when
/// either is unknown.
std::optional<double> handover_typical_s(const LoaderView& l) noexcept;

/// The share of `l`'s loop spent waiting beyond its hand-over cost (handover_mean_s):
/// waiting for batches the workers had not made yet. Empty when unknown.
std::optional<double> stall_beyond_handover(const LoaderView& l) noexcept;

/// Why `job` is not healthy though no rule named a bottleneck: "" when no judged loader
/// waits kDataStallFraction of its loop or more beyond the hand-over (stall_beyond_handover),
/// else a sentence naming the one that waits most. A loop that waits on its loader is not
/// one whose loader keeps up, whatever the cause.
std::string unexplained_stall(const JobView& job);

/// The note a healthy verdict must yield to: too_short_to_judge, else unexplained_stall.
std::string not_healthy_note(const JobView& job);

}  // namespace dldoctor::analyze
