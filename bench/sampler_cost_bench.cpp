// Micro costs behind the sampler's choices: parsing is cheap next to the syscalls, and a kept
// descriptor read with pread costs a fraction of open/read/close on /proc. Not a test.
//   build/cpp-<area>/sampler_cost_bench
#include <benchmark/benchmark.h>
#include <unistd.h>

#include <string>

#include "dldoctor_core/sample/proc_file.hpp"
#include "dldoctor_core/sample/sampler.hpp"
#include "dldoctor_core/sample/stat.hpp"
#include "dldoctor_core/sample/status.hpp"

using namespace dldoctor::sample;

namespace {
std::string self_file(const char* name) {
  ReadBuffer buf;
  auto text = read_whole(("/proc/self/" + std::string(name)).c_str(), buf);
  return text ? std::string(*text) : std::string();
}
}  // namespace

static void BM_ParseStat(benchmark::State& state) {
  const std::string text = self_file("stat");
  for (auto _ : state) benchmark::DoNotOptimize(parse_stat(text));
}
BENCHMARK(BM_ParseStat);

static void BM_ParseStatus(benchmark::State& state) {
  const std::string text = self_file("status");
  for (auto _ : state) benchmark::DoNotOptimize(parse_status(text));
}
BENCHMARK(BM_ParseStatus);

static void BM_ReadStatOpenEachTime(benchmark::State& state) {
  ReadBuffer buf;
  for (auto _ : state) benchmark::DoNotOptimize(read_whole("/proc/self/stat", buf));
}
BENCHMARK(BM_ReadStatOpenEachTime);

static void BM_ReadStatKeptOpen(benchmark::State& state) {
  ReadBuffer buf;
  FdBudget budget(1);
  ProcFile file("/proc/self/stat", &budget);
  for (auto _ : state) benchmark::DoNotOptimize(file.read(buf));
}
BENCHMARK(BM_ReadStatKeptOpen);

static void BM_ListProc(benchmark::State& state) {
  ReadBuffer buf(16384);
  FdBudget budget(1);
  ProcDir proc("/proc", &budget);
  std::vector<int> pids;
  for (auto _ : state) {
    pids.clear();
    benchmark::DoNotOptimize(proc.numbers(buf, pids));
  }
  state.counters["processes"] = double(pids.size());
}
BENCHMARK(BM_ListProc);

// One pass over this process alone, back to back (warm caches: a lower bound of a 10 Hz pass).
static void BM_SamplerPassSelf(benchmark::State& state) {
  Sampler sampler(getpid(), SamplerOptions{.capacity = 1});
  for (auto _ : state) benchmark::DoNotOptimize(sampler.sample_once());
}
BENCHMARK(BM_SamplerPassSelf);
