// The model's pick first, then a climb over num_workers from the best trial so far (a
// neighbour is tried only while untried), then the settings the profile says can matter.
#include "dldoctor_core/analyze/tune.hpp"

#include <algorithm>
#include <cmath>

namespace dldoctor::analyze::tune {

namespace {

bool tried(const Profile& p, const std::vector<Trial>& done, const Settings& s) {
  const Settings e = effective(p, s);
  return std::any_of(done.begin(), done.end(),
                     [&](const Trial& t) { return effective(p, t.settings) == e; });
}

/// The most workers worth trying: off-CPU waits allow many per CPU, a CPU-bound fetch one
/// grid step past what the measured CPU allows (the model may be wrong by a worker).
int max_workers(const Profile& p) {
  const int cpus = int(std::max(1.0, std::floor(p.usable_cpus.value_or(1))));
  if (p.off_cpu)
    return std::min(kWorkerSteps[std::size(kWorkerSteps) - 1], cpus * kMaxWorkersPerCpu);
  const int allowed = std::max(p.cpu_workers.value_or(cpus), p.num_workers);
  for (int s : kWorkerSteps)
    if (s > allowed) return s;
  return allowed;
}

Settings with_workers(Settings s, int n) {
  s.num_workers = n;
  if (n == 0) s.prefetch_factor.reset(), s.persistent_workers.reset();
  return s;
}

}  // namespace

std::optional<size_t> best_index(const std::vector<Trial>& done) {
  std::optional<size_t> best;
  for (size_t i = 0; i < done.size(); ++i) {
    const Trial& t = done[i];
    if (!t.ok || !t.batches_per_s) continue;
    if (!best || *t.batches_per_s > *done[*best].batches_per_s * (1 + kMinGain)) best = i;
  }
  return best;
}

Settings effective(const Profile& p, const Settings& s) {
  Settings e;
  const int n = s.num_workers.value_or(p.num_workers);
  e.num_workers = n;
  if (n > 0) {
    e.prefetch_factor = s.prefetch_factor.value_or(p.num_workers > 0 ? p.prefetch_factor : 2);
    e.persistent_workers = s.persistent_workers.value_or(p.num_workers > 0 && p.persistent_workers);
    e.worker_threads = s.worker_threads;
  }
  return e;
}

Settings first_guess(const Profile& p) {
  Settings s;
  if (p.keeps_up) return s;
  if (p.off_cpu && p.fetch_s && p.step_s && *p.step_s > 0) {
    // Enough workers in flight for the loop's demand, with 10 % headroom.
    const int need = int(std::ceil(*p.fetch_s / *p.step_s * 1.1 - 1e-9));
    s.num_workers = std::clamp(need, p.num_workers + 1, max_workers(p));
  } else if (p.off_cpu) {
    s.num_workers = std::min(max_workers(p), std::max(2, p.num_workers * 2));
  } else if (p.cpu_workers && *p.cpu_workers != p.num_workers) {
    s.num_workers = *p.cpu_workers;
  }
  const int n = s.num_workers.value_or(p.num_workers);
  if (p.startup_bound && n > 0) s.persistent_workers = true;
  if (p.thread_oversubscribed && n > 0) s.worker_threads = 1;
  return s;
}

std::optional<Settings> next_trial(const Profile& p, const std::vector<Trial>& done) {
  const Settings guess = first_guess(p);
  if (!tried(p, done, guess)) return guess;
  const auto best = best_index(done);
  if (!best) return std::nullopt;  // nothing measured: every trial failed
  // Start-up per epoch, or a fetch cheaper than handing its batch over: without workers.
  const bool tiny = p.fetch_s && *p.fetch_s < kInProcessFetchS;
  if ((p.startup_bound || tiny) && !p.keeps_up && !tried(p, done, with_workers({}, 0)))
    return with_workers({}, 0);
  const Settings b = done[*best].settings;
  const int w = *effective(p, b).num_workers;

  // The neighbours of the best worker count on the grid: more first while CPU is left (or
  // the workers wait), fewer first when the workers are past what the CPU allows.
  std::optional<int> up, down;
  for (int s : kWorkerSteps)
    if (s > w && s <= max_workers(p) && !up) up = s;
  for (int s : kWorkerSteps)
    if (s < w) down = s;
  const bool fewer_first = !p.off_cpu && p.cpu_workers && w > *p.cpu_workers;
  const std::optional<int> order[2] = {fewer_first ? down : up, fewer_first ? up : down};
  for (const auto& n : order)
    if (n && !tried(p, done, with_workers(b, *n))) return with_workers(b, *n);

  if (w > 0) {
    Settings s = b;
    s.persistent_workers = !*effective(p, b).persistent_workers;
    if (!tried(p, done, s)) return s;
    if (p.off_cpu) {  // more batches in flight per worker: 4, then 8 if 4 gained
      for (int f : {4, 8}) {
        Settings q = b;
        q.prefetch_factor = f;
        if (!tried(p, done, q)) return q;
      }
    }
    if (p.thread_oversubscribed) {
      Settings t = b;
      t.worker_threads = 1;
      if (!tried(p, done, t)) return t;
    }
  }
  return std::nullopt;
}

std::optional<Ceiling> ceiling(const Profile& p) {
  std::optional<Ceiling> low;
  // A limit the measured rate already exceeds was not the limit (the diagnosis measured it
  // under other settings, e.g. a step stretched by waiting): it is left out.
  const double reached = p.batches_per_s.value_or(0);
  auto consider = [&](const char* limit, std::optional<double> bps) {
    if (bps && std::isfinite(*bps) && *bps > 0 && *bps >= reached &&
        (!low || *bps < low->batches_per_s))
      low = Ceiling{limit, *bps};
  };
  if (!p.off_cpu && p.cpu_left && p.per_worker_cpu && p.fetch_s && *p.fetch_s > 0)
    consider("usable cores x CPU per batch", *p.cpu_left / (*p.fetch_s * *p.per_worker_cpu));
  if (p.step_s && *p.step_s > 0) consider("the consumer's own step", 1.0 / *p.step_s);
  // The main process cannot use more than one core: its CPU per batch (the step, unpickling
  // the workers' batches and IPC) bounds the loop.
  if (p.main_cpu_cores && p.batches_per_s && *p.main_cpu_cores > 0.05)
    consider("the main process's step, unpickling and IPC at one core",
             *p.batches_per_s / *p.main_cpu_cores);
  return low;
}

}  // namespace dldoctor::analyze::tune
