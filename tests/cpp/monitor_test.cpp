// The monitor's drain: events reach the session when a reader catches up, not only when the
// drain thread next wakes, and stop() does not wait out the thread's sleep.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>

#include "analyze_sim.hpp"
#include "dldoctor_core/monitor/monitor.hpp"

namespace dldoctor::monitor {
namespace {

using analyze::sim::event;
using analyze::sim::kMs;
using analyze::sim::kT0;
using trace::EventKind;

TEST(Monitor, AReaderCatchesUpWithoutWaitingForTheDrainThread) {
  MonitorOptions opts;
  opts.drain_interval_ms = 60'000;  // the thread drains once at its start, then sleeps
  Monitor m("", 1024, opts);
  m.start(getpid());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // its first drain is done
  trace::EventRing writer = trace::EventRing::open(m.ring().path());
  for (int i = 0; i < 10; ++i)
    ASSERT_TRUE(writer.emit(event(EventKind::kWorkerBatch, getpid(), kT0 + i * kMs, 1, 0, i, 8,
                                  kMs, 0, kMs, 64)));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(m.events_seen(), 0u);  // the drain thread sleeps
  m.catch_up();
  EXPECT_EQ(m.events_seen(), 10u);
  const auto t = std::chrono::steady_clock::now();
  m.stop();
  EXPECT_LT(std::chrono::steady_clock::now() - t, std::chrono::seconds(5));  // not 60
}

}  // namespace
}  // namespace dldoctor::monitor
