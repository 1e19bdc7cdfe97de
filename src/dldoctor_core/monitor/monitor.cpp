// Wires the run together without Python on any per-event or per-sample path: the drain
// thread and the sampler thread both feed the (thread-safe) analyzer session directly.
#include "dldoctor_core/monitor/monitor.hpp"

#include <chrono>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/common/error.hpp"

namespace dldoctor::monitor {

namespace {
/// Events moved per drain call: bounds the time the drain holds its buffer, and a full ring
/// (64 Ki) empties in a few calls.
constexpr size_t kDrainBatch = 4096;
}  // namespace

Monitor::Monitor(const std::string& ring_path, uint32_t capacity, MonitorOptions opts)
    : opts_(opts),
      ring_(std::make_unique<trace::EventRing>(trace::EventRing::create(ring_path, capacity))) {
  if (opts_.sample_interval_s <= 0) throw Error("sample interval must be positive");
}

Monitor::~Monitor() {
  try {
    stop();
  } catch (...) {
  }
}

void Monitor::start(int root_pid) {
  if (running_.exchange(true)) throw Error("the monitor is already running");
  sample::SamplerOptions so;
  so.interval_ns = static_cast<int64_t>(opts_.sample_interval_s * 1e9);
  sampler_ = std::make_unique<sample::Sampler>(root_pid, so);
  sampler_->set_callback([this](const sample::Snapshot& s) { session_.ingest(s); });
  sampler_->start();
  drain_thread_ = std::thread([this] { drain_loop(); });
}

void Monitor::stop() {
  if (!running_.exchange(false)) return;
  if (drain_thread_.joinable()) drain_thread_.join();
  if (sampler_) sampler_->stop();
  std::vector<trace::Event> buf;
  while (drain_once(buf) > 0) {
  }
}

size_t Monitor::drain_once(std::vector<trace::Event>& buf) {
  std::lock_guard<std::mutex> lock(drain_mutex_);
  buf.clear();
  size_t n = ring_->drain(buf, kDrainBatch);
  for (const auto& e : buf) {
    session_.ingest(e);
    if (e.kind == trace::EventKind::kMainBatch) {
      last_batch_ns_.store(e.t_ns + std::max<int64_t>(e.v[0], 0), std::memory_order_relaxed);
    }
  }
  events_seen_.fetch_add(n, std::memory_order_relaxed);
  return n;
}

void Monitor::drain_loop() {
  std::vector<trace::Event> buf;
  buf.reserve(kDrainBatch);
  while (running_.load(std::memory_order_relaxed)) {
    size_t n = drain_once(buf);
    if (n < kDrainBatch) {
      std::this_thread::sleep_for(std::chrono::milliseconds(opts_.drain_interval_ms));
    }
  }
}

}  // namespace dldoctor::monitor
