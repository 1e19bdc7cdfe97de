// The shared-memory event ring: every worker and the main process of a job append 64-byte
// Events; the watching process drains them. A file mapped MAP_SHARED, so any process can open
// it by path (spawned workers) or inherit the mapping (forked ones). The watcher's is a memfd
// (create_in_memory), opened by others through /proc/<watcher>/fd/<n>: never on /dev/shm
// (dldoctor diagnoses a too-small /dev/shm and must not eat it), and never on a disk's file
// system, whose writeback write-protects every page it cleans, so that the job's next event
// on it takes a fault into the file system (see create_in_memory).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "dldoctor_core/trace/event.hpp"

namespace dldoctor::trace {

/// "DLDRING1" read as a little-endian integer: marks a file as an event ring.
inline constexpr uint64_t kRingMagic = 0x31474e4952444c44ull;
/// Bumped whenever the header or the slot protocol changes.
inline constexpr uint32_t kRingVersion = 3;
/// Default slot count: 64 Ki events = 4 MiB, about a minute of a busy 8-worker job between
/// two drains at 100 ms.
inline constexpr size_t kDefaultRingCapacity = size_t{1} << 16;

/// Slots of the hand-out progress table (RingHeader::progress); a loader's is loader % this.
inline constexpr size_t kProgressSlots = 64;

/// The first page of the ring file. Counters written by different sides live on their own
/// cache lines so writers do not slow the reader down and vice versa.
struct RingHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t header_bytes;
  uint64_t capacity;  ///< slots; a power of two
  uint32_t watcher_pid;
  uint32_t pad0;
  int64_t created_ns;  ///< CLOCK_MONOTONIC at creation
  alignas(64) std::atomic<uint64_t> head;  ///< next ticket a writer reserves
  alignas(64) std::atomic<uint64_t> tail;  ///< next ticket the reader consumes
  alignas(64) std::atomic<uint64_t> dropped;  ///< events refused because the ring was full
  std::atomic<uint64_t> lost;  ///< slots reserved but never published (writer died mid-write)
  std::atomic<uint32_t> next_loader_id;  ///< hands out loader ids unique across processes
  /// Each loader's next batch due, written by its main process at every hand-out, measured
  /// or not (a fast loop's events are a sample): what a stuck loop waits for, exactly.
  /// One word a slot, so a read never mixes two loaders: see progress_key().
  alignas(64) std::atomic<uint64_t> progress[kProgressSlots];
  /// Each loader's profile schedule, shared by its main process and every worker of every
  /// epoch: see profile_key() and EventRing::claim_profile. Same slots as `progress`.
  alignas(64) std::atomic<uint64_t> profile[kProgressSlots];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free, "ring counters cross processes");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "ring counters cross processes");

/// The next-batch-due bits of a progress key (the rest: loader and epoch).
inline constexpr uint64_t kProgressIndexMask = (uint64_t{1} << 40) - 1;

/// A loader's progress as one word: loader id (16 bits), epoch (low 8 bits), next batch due
/// (40 bits). 0: none written.
constexpr uint64_t progress_key(uint16_t loader, int64_t epoch, int64_t next_index) noexcept {
  return uint64_t(loader) << 48 | (uint64_t(epoch) & 0xff) << 40 |
         (uint64_t(next_index) & kProgressIndexMask);
}

/// The earliest-next-profile bits of a profile key (the same low 40 bits as a progress key's
/// next batch).
inline constexpr uint64_t kProfileNextMask = kProgressIndexMask;

/// A loader's profile schedule as one word: loader id (16 bits), profiles taken (8 bits),
/// the earliest time of the next one (40 bits, ms after the ring's creation). 0: none taken.
constexpr uint64_t profile_key(uint16_t loader, uint32_t taken, int64_t next_ms) noexcept {
  return uint64_t(loader) << 48 | uint64_t(taken & 0xff) << 40 |
         (uint64_t(next_ms) & kProfileNextMask);
}

/// A mapped event ring; many writers (any thread of any process), one reader. Move-only;
/// unmaps on destruction (a file stays: the watcher removes its run directory; a ring in
/// memory goes with its last mapping).
class EventRing {
 public:
  /// Creates (exclusively) the file at `path` with `capacity` slots (rounded up to a power
  /// of two) and maps it. Throws dldoctor::Error with one line on failure.
  static EventRing create(const std::string& path, size_t capacity = kDefaultRingCapacity);
  /// Creates a ring in memory (a memfd, every page allocated now) and maps it; its path() is
  /// /proc/<this pid>/fd/<fd>, which open() maps in another process while this ring lives
  /// (it keeps the descriptor). A ring file on a disk's file system is written back every
  /// few seconds, and each page written back is write-protected: the job's next event on it
  /// faults into the file system (a tiny-batch loader with 2 workers kept ~2 points more of
  /// its throughput with the ring in memory, bench/overhead.py). Throws dldoctor::Error
  /// with one line when the kernel has no memfd (then create() a file instead).
  static EventRing create_in_memory(size_t capacity = kDefaultRingCapacity);
  /// Maps an existing ring file for writing (or reading). Throws dldoctor::Error with one
  /// line when the file is missing, too short or not a ring.
  static EventRing open(const std::string& path);

  EventRing(EventRing&& other) noexcept;
  EventRing& operator=(EventRing&& other) noexcept;
  EventRing(const EventRing&) = delete;
  EventRing& operator=(const EventRing&) = delete;
  ~EventRing();

  /// Appends `event` (its `seq` is ignored). Lock-free and wait-free in practice: returns
  /// false, counting a drop, when the ring is full; never blocks the caller.
  bool emit(const Event& event) noexcept;
  /// Moves up to `max` committed events (0 = all available) into `out`, in reservation order.
  /// A slot whose writer reserved it but has not published it for longer than the stall
  /// timeout is skipped and counted in lost(). Single reader only.
  size_t drain(std::vector<Event>& out, size_t max = 0) noexcept;

  /// Events refused because the ring was full.
  uint64_t dropped() const noexcept;
  /// Reserved slots the reader gave up on (a writer killed or stopped mid-write).
  uint64_t lost() const noexcept;
  /// Events reserved and not yet drained (committed or not).
  uint64_t pending() const noexcept;
  /// Loader `loader`, in its epoch `epoch`, next hands out batch `next_index` (>= 0). A
  /// relaxed store of one word: cheap enough for every hand-out.
  void note_progress(uint16_t loader, int64_t epoch, int64_t next_index) noexcept {
    header_->progress[loader % kProgressSlots].store(progress_key(loader, epoch, next_index),
                                                     std::memory_order_relaxed);
  }
  /// The next batch due that `loader` last noted in `epoch`; -1 when it noted none there (or
  /// a loader sharing its slot wrote since).
  int64_t progress(uint16_t loader, int64_t epoch) const noexcept;
  /// Whether a fetch of `loader` starting at `now_ns` (CLOCK_MONOTONIC) may be profiled: the
  /// loader's first candidate may, and each profile taken puts the next `first_spacing_ns`
  /// later, the spacing doubling with each one up to `max_spacing_ns`. The schedule lives
  /// in the ring, so it spaces the profiles of every process of the loader together: its
  /// workers, and those forked anew each epoch (a schedule of each worker's own profiled
  /// every new worker once at least: two profiles a second of a tiny-batch loader whose
  /// epochs last a second, each ~7 ms of a fresh worker's CPU). A loader sharing its slot
  /// (loader % kProgressSlots) with another starts afresh when the other wrote last.
  bool claim_profile(uint16_t loader, int64_t now_ns, int64_t first_spacing_ns,
                     int64_t max_spacing_ns) noexcept;
  /// A loader id unique among all processes writing this ring; starts at 1 (0 = unknown).
  uint16_t next_loader_id() noexcept;

  /// Slot count.
  size_t capacity() const noexcept { return capacity_; }
  /// The ring file (for a ring in memory, /proc/<pid>/fd/<fd>).
  const std::string& path() const noexcept { return path_; }
  /// Pid of the process that created the ring.
  uint32_t watcher_pid() const noexcept;
  /// How long the reader waits for an unpublished slot before skipping it.
  void set_stall_timeout(std::chrono::nanoseconds timeout) noexcept {
    stall_timeout_ns_ = timeout.count();
  }
  /// True while mapped (false after being moved from).
  bool valid() const noexcept { return header_ != nullptr; }

 private:
  EventRing(std::string path, void* base, size_t bytes, int fd = -1) noexcept;
  void unmap() noexcept;

  std::string path_;
  int fd_ = -1;  ///< kept open by a ring in memory (its path names it)
  void* base_ = nullptr;
  size_t bytes_ = 0;
  RingHeader* header_ = nullptr;
  Event* slots_ = nullptr;
  size_t capacity_ = 0;
  uint64_t mask_ = 0;
  // Reader-side state: when the slot at `stalled_ticket_` was first seen unpublished.
  uint64_t stalled_ticket_ = UINT64_MAX;
  int64_t stalled_since_ns_ = 0;
  // A writer spends nanoseconds between reserving and publishing; one that is still not
  // done after a second was killed or stopped (SIGSTOP, debugger), not merely preempted.
  int64_t stall_timeout_ns_ = 1'000'000'000;
};

}  // namespace dldoctor::trace
