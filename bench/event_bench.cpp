// Cost of recording one event in C++ (budget: <= 50 ns, DESIGN §6), with one and two
// writer threads, while a reader thread drains the ring the way the watcher does.
//   build/cpp-*/event_bench --benchmark_min_time=0.5
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <benchmark/benchmark.h>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/trace/ring.hpp"

namespace {

using dldoctor::trace::Event;
using dldoctor::trace::EventKind;
using dldoctor::trace::EventRing;

// One ring and one draining reader for the whole benchmark run.
struct Fixture {
  std::string dir;
  std::unique_ptr<EventRing> ring;
  std::atomic<bool> stop{false};
  std::thread reader;

  Fixture() {
    char tmpl[] = "/tmp/dldoctor-bench-XXXXXX";
    dir = ::mkdtemp(tmpl);
    ring = std::make_unique<EventRing>(EventRing::create(dir + "/ring", size_t{1} << 20));
    auto reader_ring = std::make_unique<EventRing>(EventRing::open(dir + "/ring"));
    reader = std::thread([this, r = std::move(reader_ring)]() mutable {
      std::vector<Event> out;
      out.reserve(size_t{1} << 20);
      while (!stop.load(std::memory_order_relaxed)) {
        out.clear();
        if (r->drain(out) == 0) std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    });
  }
  ~Fixture() {
    stop = true;
    reader.join();
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
  EventRing& ring = *fixture().ring;
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
BENCHMARK(BM_Emit)->Threads(1)->Threads(2)->UseRealTime();

// What a hook actually pays: two clock reads, one thread-CPU read and the emit.
void BM_EmitWithClocks(benchmark::State& state) {
  EventRing& ring = *fixture().ring;
  Event e = sample_event();
  for (auto _ : state) {
    e.t_ns = dldoctor::now_ns();
    e.v[2] = dldoctor::thread_cpu_ns();
    e.v[0] = dldoctor::now_ns() - e.t_ns;
    benchmark::DoNotOptimize(ring.emit(e));
  }
}
BENCHMARK(BM_EmitWithClocks);

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
