// The fixed-size record that workers and the main process write into the shared event
// ring. One cache line each, so writers on different cores never share a line.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <iterator>

namespace dldoctor::trace {

/// What an event records; the meaning of `index`, `count` and `v[]` per kind is below.
/// This header is the one definition of the event vocabulary: the binding exports it
/// (`_ext.trace_vocabulary()`) and the Python side reads it from there.
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
  /// t_ns = fetch start. flags = BatchFlags. weight = the fetches it stands for: a stream
  /// of fetches faster than BatchSampler's threshold is measured as a sample.
  kWorkerBatch = 2,
  /// The main process handed a batch to the consumer. index = batch index, t_ns = when the
  /// consumer asked for it; v[0] = ns blocked waiting for it, v[1] = ns the consumer spent
  /// since the previous batch was handed out (-1 for the first), v[2] = pin-memory ns (-1 n/a).
  /// worker = the worker that produced it (-1: main process or unknown), count = samples
  /// when the main process fetched it itself (num_workers=0), else 0. weight = the hand-outs
  /// it stands for: a single-process loop faster than BatchSampler's threshold is measured
  /// as a sample, a loader with workers from 500 hand-outs a second on (the hang doctor
  /// reads each one's next batch due from the ring's progress table instead).
  kMainBatch = 3,
  /// A worker process started (worker = id, v[0] = its pid's parent, v[1] = when the process
  /// itself started, CLOCK_MONOTONIC ns at 10 ms resolution, -1 unknown: a spawned worker's
  /// interpreter start-up and dataset unpickling happen before t_ns).
  kWorkerStart = 4,
  /// A worker left its loop (v[0] = batches it fetched, v[1] = 1 if the loop raised,
  /// v[2] = its last fetches that no kWorkerBatch stands for: the sample's unmeasured tail).
  kWorkerExit = 5,
  /// The user's code raised inside a worker's fetch (text in the side log). index = batch,
  /// v[0] = ns from fetch start to the exception.
  kWorkerException = 6,
  /// The iterator was exhausted or shut down (end of epoch). index = batches handed out,
  /// v[0] = why (IterEndReason), v[1] = epoch; a single-process iterator's sample tails:
  /// v[2] = its fetches no kWorkerBatch stands for, v[3] = its hand-outs no kMainBatch does.
  kIterEnd = 7,
  /// A worker was seen dead by the main process (v[0] = exit code, -1 when killed by a
  /// signal or unknown; v[1] = signal, 0 if none; v[2] = its pid).
  kWorkerDied = 8,
  /// A worker's share of an IterableDataset ran out (its fetch raised StopIteration); the
  /// iterator goes on with the other workers until each has run out. worker = id,
  /// v[0] = batches it fetched in this epoch, v[1] = its epoch (persistent workers count on).
  kWorkerDrained = 9,
};
/// The highest EventKind; kinds run 1..kLastEventKind without gaps.
inline constexpr uint8_t kLastEventKind = 9;

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

/// v[0] of kIterEnd: why the epoch ended.
enum class IterEndReason : int64_t {
  kExhausted = 0,       ///< StopIteration: every batch was handed out
  kShutDown = 1,        ///< shut down or dropped before the end (break, exception)
  kCreationFailed = 2,  ///< creating the iterator failed
};

/// One name of the vocabulary and its value, as the binding exports it.
struct VocabularyEntry {
  const char* name;
  int64_t value;
};

/// Every EventKind but kNone, in order, by the name Python uses.
inline constexpr VocabularyEntry kEventKindNames[] = {
    {"iter_start", int64_t(EventKind::kIterStart)},
    {"worker_batch", int64_t(EventKind::kWorkerBatch)},
    {"main_batch", int64_t(EventKind::kMainBatch)},
    {"worker_start", int64_t(EventKind::kWorkerStart)},
    {"worker_exit", int64_t(EventKind::kWorkerExit)},
    {"worker_exception", int64_t(EventKind::kWorkerException)},
    {"iter_end", int64_t(EventKind::kIterEnd)},
    {"worker_died", int64_t(EventKind::kWorkerDied)},
    {"worker_drained", int64_t(EventKind::kWorkerDrained)},
};
/// Every LoaderFlags bit.
inline constexpr VocabularyEntry kLoaderFlagNames[] = {
    {"pin_memory", kPinMemory}, {"persistent_workers", kPersistentWorkers},
    {"in_order", kInOrder},     {"iterable_dataset", kIterableDataset},
    {"drop_last", kDropLast},   {"custom_collate", kCustomCollate},
};
/// Every BatchFlags bit.
inline constexpr VocabularyEntry kBatchFlagNames[] = {{"profiled", kProfiled}};
/// Every StartMethod.
inline constexpr VocabularyEntry kStartMethodNames[] = {
    {"unknown", int64_t(StartMethod::kUnknown)},
    {"fork", int64_t(StartMethod::kFork)},
    {"spawn", int64_t(StartMethod::kSpawn)},
    {"forkserver", int64_t(StartMethod::kForkserver)},
};
/// Every IterEndReason.
inline constexpr VocabularyEntry kIterEndReasonNames[] = {
    {"exhausted", int64_t(IterEndReason::kExhausted)},
    {"shut_down", int64_t(IterEndReason::kShutDown)},
    {"creation_failed", int64_t(IterEndReason::kCreationFailed)},
};

namespace detail {
template <size_t N>
constexpr bool runs_from(const VocabularyEntry (&t)[N], int64_t first) {
  for (size_t i = 0; i < N; ++i)
    if (t[i].value != first + int64_t(i)) return false;
  return true;
}
}  // namespace detail
static_assert(std::size(kEventKindNames) == kLastEventKind && detail::runs_from(kEventKindNames, 1),
              "every EventKind has a name, in order");
static_assert(detail::runs_from(kStartMethodNames, 0) && std::size(kStartMethodNames) == 4);
static_assert(detail::runs_from(kIterEndReasonNames, 0) && std::size(kIterEndReasonNames) == 3);

/// One record: 64 bytes. `seq` is written last (release) and marks the slot as committed.
struct alignas(64) Event {
  std::atomic<uint32_t> seq{0};
  uint32_t pid = 0;
  int64_t t_ns = 0;
  EventKind kind = EventKind::kNone;
  uint8_t flags = 0;
  uint16_t loader = 0;
  int16_t worker = -1;
  /// Batches this event stands for: 0 or 1 itself alone; more when the writer measured a
  /// sample of a fast stream (kWorkerBatch, kMainBatch) and skipped weight - 1 since its last.
  uint16_t weight = 0;
  int32_t index = -1;
  uint32_t count = 0;
  int64_t v[4] = {0, 0, 0, 0};

  Event() = default;
  Event(const Event& o) noexcept { *this = o; }
  Event& operator=(const Event& o) noexcept {
    seq.store(o.seq.load(std::memory_order_relaxed), std::memory_order_relaxed);
    pid = o.pid;
    t_ns = o.t_ns;
    kind = o.kind;
    flags = o.flags;
    loader = o.loader;
    worker = o.worker;
    weight = o.weight;
    index = o.index;
    count = o.count;
    for (int i = 0; i < 4; ++i) v[i] = o.v[i];
    return *this;
  }
};
static_assert(sizeof(Event) == 64, "an event is one cache line");

/// The batches an event stands for (its weight, at least 1).
inline int64_t batches_of(const Event& e) noexcept { return e.weight > 1 ? e.weight : 1; }

}  // namespace dldoctor::trace
