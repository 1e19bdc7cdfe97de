// The fixed-size record that workers and the main process write into the shared event
// ring. One cache line each, so writers on different cores never share a line.
#pragma once

#include <atomic>
#include <cstdint>

namespace dldoctor::trace {

/// What an event records; the meaning of `index`, `count` and `v[]` per kind is below.
enum class EventKind : uint8_t {
  kNone = 0,
  /// A loader's iterator was created (one per epoch). worker = num_workers,
  /// count = batch_size (0 = None), index = prefetch_factor (0 = n/a), flags = LoaderFlags,
  /// v[0] = timeout (ms), v[1] = main process pid, v[2] = start method (StartMethod),
  /// v[3] = epoch of this loader (1 = first iterator; persistent workers count resets).
  kIterStart = 1,
  /// A worker finished one batch. worker = worker id (-1: main process, num_workers=0),
  /// index = batch index (send order; -1 unknown), count = samples,
  /// v[0] = fetch ns (whole batch: getitem + collate), v[1] = collate ns,
  /// v[2] = thread CPU ns over the fetch, v[3] = bytes of the batch's tensors (-1 unknown).
  /// t_ns = fetch start. flags = BatchFlags.
  kWorkerBatch = 2,
  /// The main process handed a batch to the consumer. index = batch index, t_ns = when the
  /// consumer asked for it; v[0] = ns blocked waiting for it, v[1] = ns the consumer spent
  /// since the previous batch was handed out (-1 for the first), v[2] = pin-memory ns (-1 n/a).
  /// worker = the worker that produced it (-1: main process or unknown), count = samples
  /// when the main process fetched it itself (num_workers=0), else 0.
  kMainBatch = 3,
  /// A worker process started (worker = id, v[0] = its pid's parent, v[1] = when the process
  /// itself started, CLOCK_MONOTONIC ns at 10 ms resolution, -1 unknown: a spawned worker's
  /// interpreter start-up and dataset unpickling happen before t_ns).
  kWorkerStart = 4,
  /// A worker left its loop (v[0] = batches it fetched, v[1] = 1 if the loop raised).
  kWorkerExit = 5,
  /// The user's code raised inside a worker's fetch (text in the side log). index = batch,
  /// v[0] = ns from fetch start to the exception.
  kWorkerException = 6,
  /// The iterator was exhausted or shut down (end of epoch). index = batches handed out,
  /// v[0] = why (0 exhausted, 1 shut down or dropped early, 2 creating it failed), v[1] = epoch.
  kIterEnd = 7,
  /// A worker was seen dead by the main process (v[0] = exit code, -1 when killed by a
  /// signal or unknown; v[1] = signal, 0 if none; v[2] = its pid).
  kWorkerDied = 8,
};

/// Bits of Event::flags for kIterStart.
enum LoaderFlags : uint8_t {
  kPinMemory = 1 << 0,
  kPersistentWorkers = 1 << 1,
  kInOrder = 1 << 2,
  kIterableDataset = 1 << 3,
  kDropLast = 1 << 4,
  kCustomCollate = 1 << 5,
};

/// Bits of Event::flags for kWorkerBatch.
enum BatchFlags : uint8_t {
  /// The fetch ran under the sampling profiler, so it was slower than usual.
  kProfiled = 1 << 0,
};

enum class StartMethod : int64_t { kUnknown = 0, kFork = 1, kSpawn = 2, kForkserver = 3 };

/// One record: 64 bytes. `seq` is written last (release) and marks the slot as committed.
struct alignas(64) Event {
  std::atomic<uint32_t> seq{0};
  uint32_t pid = 0;
  int64_t t_ns = 0;
  EventKind kind = EventKind::kNone;
  uint8_t flags = 0;
  uint16_t loader = 0;
  int16_t worker = -1;
  uint16_t reserved = 0;
  int32_t index = -1;
  uint32_t count = 0;
  int64_t v[4] = {0, 0, 0, 0};

  Event() = default;
  Event(const Event& o) noexcept { *this = o; }
  Event& operator=(const Event& o) noexcept {
    seq.store(o.seq.load(std::memory_order_relaxed), std::memory_order_relaxed);
    pid = o.pid; t_ns = o.t_ns; kind = o.kind; flags = o.flags; loader = o.loader;
    worker = o.worker; reserved = o.reserved; index = o.index; count = o.count;
    for (int i = 0; i < 4; ++i) v[i] = o.v[i];
    return *this;
  }
};
static_assert(sizeof(Event) == 64, "an event is one cache line");

}  // namespace dldoctor::trace
