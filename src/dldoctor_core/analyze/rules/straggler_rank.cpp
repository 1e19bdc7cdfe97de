// The gating rank is found from the loops alone (waits and steps per rank); its cause is
// whatever the per-loader rules found about its loader, so the verdict stays that cause.
#include "dldoctor_core/analyze/rules/straggler_rank.hpp"

#include <algorithm>
#include <map>

#include "dldoctor_core/analyze/data_bound.hpp"
#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze::straggler_rank {

namespace {

/// Each rank's busiest judged loader (an evaluation loader beside it is not the loop).
std::map<int, const LoaderView*> rank_loops(const JobView& job) {
  std::map<int, const LoaderView*> out;
  for (const LoaderView& l : job.loaders) {
    if (!l.rank.known() || !l.data_stall_fraction || !l.wait_mean_s || !l.step_mean_s) continue;
    if (l.stepped_batches < kMinSteadyBatches || l.loop_s < kMinJudgedLoopS) continue;
    const LoaderView*& best = out[l.rank.shown()];
    if (!best || l.stepped_batches > best->stepped_batches) best = &l;
  }
  return out;
}

RankLoop loop_of(const LoaderView& l) {
  RankLoop r;
  r.rank = l.rank.shown();
  r.loader = l.loader;
  r.rank_loader = l.rank_loader;
  r.num_workers = l.config.num_workers;
  r.data_stall_fraction = *l.data_stall_fraction;
  r.wait_ms = *l.wait_mean_s * 1e3;
  r.step_ms = *l.step_mean_s * 1e3;
  r.getitem_p50_ms = l.getitem_p50_ms;
  r.main_cpu_pct = l.main.cpu_pct;
  return r;
}

std::string ranks_text(const std::vector<RankLoop>& rs) {
  std::string out = rs.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < rs.size(); ++i)
    out += (i ? (i + 1 == rs.size() ? " and " : ", ") : "") + std::to_string(rs[i].rank);
  return out;
}

}  // namespace

std::optional<Evidence> detect(const JobView& job, const std::vector<report::Finding>& found) {
  const std::map<int, const LoaderView*> loops = rank_loops(job);
  if (loops.size() < 2) return std::nullopt;
  const LoaderView* gate = nullptr;
  for (const auto& [rank, l] : loops)
    if (!gate || *l->data_stall_fraction > *gate->data_stall_fraction) gate = l;
  if (!stalled(*gate)) return std::nullopt;

  Evidence e;
  e.gating = loop_of(*gate);
  double lost = 0, lost_share = 0, getitem = 0;
  int with_getitem = 0;
  for (const auto& [rank, l] : loops) {
    if (l == gate) continue;
    RankLoop o = loop_of(*l);
    // It waits for its own batches too: not only waiting for the gating rank.
    if (o.data_stall_fraction > kOthersStallShare * e.gating.data_stall_fraction)
      return std::nullopt;
    // Its steps do not carry the gating rank's wait: no collective ties them together.
    const double extra = o.step_ms - e.gating.step_ms;
    if (extra < kWaitShownShare * e.gating.wait_ms) return std::nullopt;
    lost += extra;
    lost_share += extra / (o.wait_ms + o.step_ms);
    if (o.getitem_p50_ms) getitem += *o.getitem_p50_ms, ++with_getitem;
    e.waiting.push_back(o);
  }
  e.lost_ms = lost / double(e.waiting.size());
  e.lost_fraction = lost_share / double(e.waiting.size());
  if (e.lost_fraction < kMinLostShare) return std::nullopt;
  if (with_getitem > 0) e.others_getitem_p50_ms = getitem / with_getitem;
  e.heavy_data = e.gating.getitem_p50_ms && e.others_getitem_p50_ms &&
                 *e.others_getitem_p50_ms > 0 &&
                 *e.gating.getitem_p50_ms >= kHeavyDataRatio * *e.others_getitem_p50_ms;

  // Its cause: the most important finding about its loader (found is not ordered yet).
  const report::Finding* cause = nullptr;
  for (const report::Finding& f : found) {
    if (f.loader != gate->loader || f.severity == report::Severity::kInfo) continue;
    if (!cause || f.severity > cause->severity ||
        (f.severity == cause->severity && f.score > cause->score))
      cause = &f;
  }
  // Critical: it gates the job. Just below its cause, so the verdict is the cause (what to
  // fix), and this finding explains the other ranks beside it.
  e.rank = {report::Severity::kCritical, report::Tier::kMeasure, e.gating.data_stall_fraction};
  if (cause) {
    e.cause_id = cause->id;
    e.cause_fix = cause->fix;
    if (cause->severity == report::Severity::kCritical && cause->tier == report::Tier::kMeasure)
      e.rank.score = cause->score * 0.999;
  }
  return e;
}

report::Finding finding(const Evidence& e) {
  const RankLoop& g = e.gating;
  report::Finding f = report::make_finding("straggler_rank", g.loader, e.rank);
  f.rank = g.rank;
  const std::string others = ranks_text(e.waiting);
  f.title = "Rank " + std::to_string(g.rank) + " holds the job back: its loader stalls " +
            num(g.data_stall_fraction * 100) + "% of its loop" +
            (e.cause_id.empty() ? std::string() : " (" + e.cause_id + ")") + ", and " + others +
            " wait" + (e.waiting.size() == 1 ? "s" : "") + " for it " + num(e.lost_fraction * 100) +
            "% of " + (e.waiting.size() == 1 ? "its" : "their") + " loop";
  f.add("gating_rank", double(g.rank));
  f.add("gating_loader", loader_label(g.rank, g.rank_loader));
  f.add("data_stall_fraction", g.data_stall_fraction);
  f.add("wait_per_batch_ms", g.wait_ms);
  f.add("step_ms", g.step_ms);
  if (!e.cause_id.empty()) f.add("cause", e.cause_id);
  std::string waiting, stalls, steps, cpus;
  for (const RankLoop& o : e.waiting) {
    const std::string sep = waiting.empty() ? "" : ", ";
    waiting += sep + std::to_string(o.rank);
    stalls += sep + std::to_string(o.rank) + ": " + num(o.data_stall_fraction * 100) + "%";
    steps += sep + std::to_string(o.rank) + ": " + num(o.step_ms) + " ms";
    if (o.main_cpu_pct)
      cpus +=
          (cpus.empty() ? "" : ", ") + std::to_string(o.rank) + ": " + num(*o.main_cpu_pct) + "%";
  }
  f.add("waiting_ranks", waiting);
  f.add("waiting_ranks_data_stall", stalls);
  f.add("waiting_ranks_step_ms", steps);
  if (!cpus.empty()) f.add("waiting_ranks_main_cpu_pct", cpus);
  f.add("others_wait_per_step_ms", e.lost_ms);
  f.add("others_lost_fraction", e.lost_fraction);
  if (g.getitem_p50_ms) f.add("getitem_p50_ms", *g.getitem_p50_ms);
  if (e.others_getitem_p50_ms) f.add("others_getitem_p50_ms", *e.others_getitem_p50_ms);

  const std::string who = "rank " + std::to_string(g.rank) + "'s loader";
  if (e.heavy_data)
    f.fix = "Rebalance the shards: " + who + " reads samples that cost " +
            num(*g.getitem_p50_ms / *e.others_getitem_p50_ms) + "x the others' (" +
            num(*g.getitem_p50_ms) + " vs " + num(*e.others_getitem_p50_ms) +
            " ms each), so give every rank an equal share of the work (shuffle before "
            "sharding: DistributedSampler(shuffle=True), or shard by cost, not by count)";
  else
    f.fix = "Speed up " + who + " (" + loader_label(g.rank, g.rank_loader) + ")";
  if (!e.cause_fix.empty())
    f.fix +=
        (e.heavy_data ? ". For that rank's loader (" + e.cause_id + "): " : ": ") + e.cause_fix;
  else
    f.fix += e.heavy_data ? "." : ": more workers or cheaper samples for that rank.";
  f.why =
      "In synchronous data-parallel training every rank waits in the gradient all-reduce "
      "until all have stepped, so the job moves at the pace of its slowest rank. Rank " +
      std::to_string(g.rank) + " waits " + num(g.wait_ms) + " ms for each batch; meanwhile " +
      others + " (whose loaders keep up) sit" + (e.waiting.size() == 1 ? "s" : "") +
      " in the collective: " + (e.waiting.size() == 1 ? "its" : "their") + " steps take " +
      num(e.lost_ms) + " ms longer than rank " + std::to_string(g.rank) + "'s own" +
      (cpus.empty() ? std::string() : " (main process CPU, % of a core, by rank: " + cpus + ")") +
      ". Those ranks are not main-process bound: speeding them up buys nothing, fixing "
      "rank " +
      std::to_string(g.rank) + " speeds up every rank.";
  return f;
}

}  // namespace dldoctor::analyze::straggler_rank
