// Cost of recording one event in C++ (budget: <= 50 ns, DESIGN §6), with one and two
// writer threads contending for the ring's head; plus the refusal path, the drain, and what
// an unmeasured batch of a sampled fast stream pays instead (the sampler's decision on the
// coarse clock).
//   build/cpp-*/event_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/trace/batch_sampler.hpp"
#include "dldoctor_core/trace/ring.hpp"

namespace {

using dldoctor::trace::Event;
using dldoctor::trace::EventKind;
using dldoctor::trace::EventRing;

// Iterations per thread per run; the ring holds two runs of two threads, so it is never full
// while timing (refused emits are cheaper and would flatter the figure).
constexpr int64_t kIterationsPerThread = int64_t{1} << 19;
constexpr size_t kRingCapacity = size_t{1} << 21;  // 128 MiB

// One ring for the whole benchmark run, with every page touched once beforehand: a fresh
// ring pays a page fault per 64 events on its first lap only.
struct Fixture {
  std::string dir;
  std::unique_ptr<EventRing> ring;
  std::vector<Event> sink;

  Fixture() {
    char tmpl[] = "/tmp/dldoctor-bench-XXXXXX";
    dir = ::mkdtemp(tmpl);
    ring = std::make_unique<EventRing>(EventRing::create(dir + "/ring", kRingCapacity));
    Event e;
    for (size_t i = 0; i < kRingCapacity; ++i) ring->emit(e);
    drain();
  }
  void drain() {
    sink.clear();
    ring->drain(sink);
  }
  ~Fixture() {
    ring.reset();
    std::filesystem::remove_all(dir);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

Event sample_event() {
  Event e;
  e.kind = EventKind::kWorkerBatch;
  e.pid = static_cast<uint32_t>(::getpid());
  e.loader = 1;
  e.worker = 0;
  e.count = 64;
  return e;
}

void BM_Emit(benchmark::State& state) {
  Fixture& f = fixture();
  // Before the loop: the threads start timing together only after every one got here.
  if (state.thread_index() == 0) f.drain();
  EventRing& ring = *f.ring;
  Event e = sample_event();
  e.worker = static_cast<int16_t>(state.thread_index());
  uint64_t refused = 0;
  int32_t i = 0;
  for (auto _ : state) {
    e.index = i++;
    refused += !ring.emit(e);
  }
  state.counters["refused"] = static_cast<double>(refused);
}
BENCHMARK(BM_Emit)
    ->Iterations(kIterationsPerThread)
    ->Repetitions(5)
    ->ReportAggregatesOnly(true)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

// What a hook actually pays: two clock reads, one thread-CPU read and the emit.
void BM_EmitWithClocks(benchmark::State& state) {
  Fixture& f = fixture();
  f.drain();
  EventRing& ring = *f.ring;
  Event e = sample_event();
  for (auto _ : state) {
    e.t_ns = dldoctor::now_ns();
    e.v[2] = dldoctor::thread_cpu_ns();
    e.v[0] = dldoctor::now_ns() - e.t_ns;
    benchmark::DoNotOptimize(ring.emit(e));
  }
}
BENCHMARK(BM_EmitWithClocks)->Iterations(kIterationsPerThread);

// A batch of a fast stream (a period of 64), decided and recorded as the hooks do: a coarse
// clock read at the start, the sampler's decision, its bookkeeping, a coarse read at the end.
void BM_SampledBatch(benchmark::State& state) {
  dldoctor::trace::BatchSampler s(1);
  s.resume(64);
  uint64_t measured = 0;
  for (auto _ : state) {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    const int64_t t = int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
    const bool sampled = s.decide(t);
    measured += s.record(sampled, false, t);
    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
    benchmark::DoNotOptimize(ts);
  }
  state.counters["measured_share"] = double(measured) / double(state.iterations());
}
BENCHMARK(BM_SampledBatch);

// The refusal path when the ring is full (nobody draining): must stay cheap too.
void BM_EmitFullRing(benchmark::State& state) {
  char tmpl[] = "/tmp/dldoctor-bench-full-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  {
    auto ring = EventRing::create(dir + "/ring", 64);
    Event e = sample_event();
    for (int i = 0; i < 64; ++i) ring.emit(e);
    for (auto _ : state) benchmark::DoNotOptimize(ring.emit(e));
  }
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_EmitFullRing);

void BM_Drain(benchmark::State& state) {
  char tmpl[] = "/tmp/dldoctor-bench-drain-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  {
    auto ring = EventRing::create(dir + "/ring", 4096);
    Event e = sample_event();
    std::vector<Event> out;
    out.reserve(4096);
    for (auto _ : state) {
      state.PauseTiming();
      out.clear();
      for (int i = 0; i < 4096; ++i) ring.emit(e);
      state.ResumeTiming();
      ring.drain(out);
    }
    state.SetItemsProcessed(state.iterations() * 4096);
  }
  std::filesystem::remove_all(dir);
}
BENCHMARK(BM_Drain);

}  // namespace
