// Protocol: a writer reserves ticket t by CAS on head (refusing when the reader is a whole
// ring behind), copies its record into slot t % capacity and publishes it by storing
// seq = t + 1 (release). The reader consumes tickets in order and advances tail (release)
// only after it has copied a slot out, so a writer that saw tail (acquire) never overwrites
// a slot still being read.
#include "dldoctor_core/trace/ring.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>
#include <utility>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/common/error.hpp"

namespace dldoctor::trace {
namespace {

// The header gets a page of its own so the slots start page- and cache-line-aligned.
constexpr size_t kHeaderBytes = 4096;
static_assert(sizeof(RingHeader) <= kHeaderBytes);
// 2^24 slots = 1 GiB: far beyond any sane ring; a bigger request is a bug.
constexpr size_t kMaxCapacity = size_t{1} << 24;
// The reader publishes its progress at least this often inside one drain, so writers see
// free space without waiting for a long drain to finish.
constexpr size_t kTailPublishEvery = 256;
// Bytes of an Event after `seq`: what a writer copies before publishing.
constexpr size_t kPayloadOffset = sizeof(std::atomic<uint32_t>);
constexpr size_t kPayloadBytes = sizeof(Event) - kPayloadOffset;

std::string errno_text() { return std::strerror(errno); }

size_t round_up_pow2(size_t n) {
  size_t p = 1;
  while (p < n) p <<= 1;
  return p;
}

}  // namespace

EventRing::EventRing(std::string path, void* base, size_t bytes, int fd) noexcept
    : path_(std::move(path)),
      fd_(fd),
      base_(base),
      bytes_(bytes),
      header_(static_cast<RingHeader*>(base)),
      slots_(reinterpret_cast<Event*>(static_cast<char*>(base) + kHeaderBytes)),
      capacity_(header_->capacity),
      mask_(header_->capacity - 1) {}

namespace {

/// `capacity` checked and rounded (up to a power of two); throws on a bad request.
size_t ring_capacity(size_t capacity) {
  if (capacity == 0 || capacity > kMaxCapacity) {
    throw Error("event ring capacity must be between 1 and " + std::to_string(kMaxCapacity) +
                ", got " + std::to_string(capacity));
  }
  return round_up_pow2(capacity < 2 ? 2 : capacity);
}

/// Sizes `fd` to `bytes` with every block allocated, maps it and writes a fresh header of
/// `capacity` slots; nullptr with `*problem` set on failure (the caller closes `fd`).
void* map_fresh(int fd, size_t bytes, size_t capacity, const std::string& what,
                std::string* problem) {
  // Allocate every block now: a sparse file on a full disk (or a memfd past its memory
  // limit) would hand a worker SIGBUS on its first write to a new page, and dldoctor must
  // never break the loader.
  if (int rc = ::posix_fallocate(fd, 0, static_cast<off_t>(bytes)); rc != 0) {
    *problem = "cannot size event ring " + what + " to " + std::to_string(bytes) +
               " bytes: " + std::strerror(rc);
    return nullptr;
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    *problem = "cannot map event ring " + what + ": " + errno_text();
    return nullptr;
  }
  auto* header = new (base) RingHeader{};
  header->version = kRingVersion;
  header->header_bytes = kHeaderBytes;
  header->capacity = capacity;
  header->watcher_pid = static_cast<uint32_t>(::getpid());
  header->created_ns = now_ns();
  header->head.store(0, std::memory_order_relaxed);
  header->tail.store(0, std::memory_order_relaxed);
  header->dropped.store(0, std::memory_order_relaxed);
  header->lost.store(0, std::memory_order_relaxed);
  header->next_loader_id.store(0, std::memory_order_relaxed);
  for (auto& slot : header->progress) slot.store(0, std::memory_order_relaxed);
  for (auto& slot : header->profile) slot.store(0, std::memory_order_relaxed);
  // The magic last: a process that opens a half-initialised file refuses it.
  std::atomic_thread_fence(std::memory_order_release);
  header->magic = kRingMagic;
  return base;
}

}  // namespace

EventRing EventRing::create(const std::string& path, size_t capacity) {
  capacity = ring_capacity(capacity);
  const size_t bytes = kHeaderBytes + capacity * sizeof(Event);
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw Error("cannot create event ring " + path + ": " + errno_text());
  std::string problem;
  void* base = map_fresh(fd, bytes, capacity, path, &problem);
  ::close(fd);
  if (base == nullptr) {
    ::unlink(path.c_str());
    throw Error(problem);
  }
  return EventRing(path, base, bytes);
}

EventRing EventRing::create_in_memory(size_t capacity) {
  capacity = ring_capacity(capacity);
  const size_t bytes = kHeaderBytes + capacity * sizeof(Event);
  int fd = ::memfd_create("dldoctor-events", MFD_CLOEXEC);
  if (fd < 0) throw Error("cannot create an event ring in memory: " + errno_text());
  std::string path = "/proc/" + std::to_string(::getpid()) + "/fd/" + std::to_string(fd);
  std::string problem;
  void* base = map_fresh(fd, bytes, capacity, "in memory", &problem);
  if (base == nullptr) {
    ::close(fd);
    throw Error(problem);
  }
  return EventRing(std::move(path), base, bytes, fd);
}

EventRing EventRing::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) throw Error("cannot open event ring " + path + ": " + errno_text());
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    throw Error("cannot stat event ring " + path + ": " + std::strerror(e));
  }
  const size_t bytes = static_cast<size_t>(st.st_size);
  if (bytes < kHeaderBytes + 2 * sizeof(Event)) {
    ::close(fd);
    throw Error("not an event ring (file too short): " + path);
  }
  void* base = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  int map_errno = errno;
  ::close(fd);
  if (base == MAP_FAILED) {
    throw Error("cannot map event ring " + path + ": " + std::strerror(map_errno));
  }
  const auto* header = static_cast<const RingHeader*>(base);
  std::atomic_thread_fence(std::memory_order_acquire);
  std::string problem;
  if (header->magic != kRingMagic) {
    problem = "not an event ring (bad magic)";
  } else if (header->version != kRingVersion) {
    problem = "event ring version " + std::to_string(header->version) + ", this dldoctor reads " +
              std::to_string(kRingVersion) + " (mixed dldoctor installs?)";
  } else if (header->header_bytes != kHeaderBytes || header->capacity < 2 ||
             (header->capacity & (header->capacity - 1)) != 0 ||
             kHeaderBytes + header->capacity * sizeof(Event) != bytes) {
    problem = "corrupt event ring header";
  }
  if (!problem.empty()) {
    ::munmap(base, bytes);
    throw Error(problem + ": " + path);
  }
  return EventRing(path, base, bytes);
}

EventRing::EventRing(EventRing&& other) noexcept { *this = std::move(other); }

EventRing& EventRing::operator=(EventRing&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    base_ = std::exchange(other.base_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    header_ = std::exchange(other.header_, nullptr);
    slots_ = std::exchange(other.slots_, nullptr);
    capacity_ = std::exchange(other.capacity_, 0);
    mask_ = std::exchange(other.mask_, 0);
    stalled_ticket_ = other.stalled_ticket_;
    stalled_since_ns_ = other.stalled_since_ns_;
    stall_timeout_ns_ = other.stall_timeout_ns_;
  }
  return *this;
}

EventRing::~EventRing() { unmap(); }

void EventRing::unmap() noexcept {
  if (base_ != nullptr) ::munmap(base_, bytes_);
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  base_ = nullptr;
  header_ = nullptr;
  slots_ = nullptr;
}

bool EventRing::emit(const Event& event) noexcept {
  RingHeader& h = *header_;
  // tail before head: then ticket >= tail holds, and ticket - tail cannot wrap around.
  uint64_t tail = h.tail.load(std::memory_order_acquire);
  uint64_t ticket = h.head.load(std::memory_order_relaxed);
  for (;;) {
    if (ticket - tail >= capacity_) {
      const uint64_t fresh_tail = h.tail.load(std::memory_order_acquire);
      if (fresh_tail == tail) {
        h.dropped.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
      tail = fresh_tail;
      ticket = h.head.load(std::memory_order_relaxed);
      continue;
    }
    // On failure `ticket` becomes the current head, read after `tail`: still >= tail.
    if (h.head.compare_exchange_weak(ticket, ticket + 1, std::memory_order_relaxed,
                                     std::memory_order_relaxed)) {
      break;
    }
  }
  Event& slot = slots_[ticket & mask_];
  std::memcpy(reinterpret_cast<char*>(&slot) + kPayloadOffset,
              reinterpret_cast<const char*>(&event) + kPayloadOffset, kPayloadBytes);
  slot.seq.store(static_cast<uint32_t>(ticket + 1), std::memory_order_release);
  return true;
}

size_t EventRing::drain(std::vector<Event>& out, size_t max) noexcept {
  RingHeader& h = *header_;
  uint64_t tail = h.tail.load(std::memory_order_relaxed);  // only the reader writes it
  const uint64_t head = h.head.load(std::memory_order_acquire);
  size_t taken = 0;
  size_t since_publish = 0;
  while (tail < head && (max == 0 || taken < max)) {
    Event& slot = slots_[tail & mask_];
    const uint32_t want = static_cast<uint32_t>(tail + 1);
    if (slot.seq.load(std::memory_order_acquire) != want) {
      // Reserved, not yet published. Normally the writer is a few instructions away from
      // done; only a writer that died or was stopped mid-write leaves it so for long.
      const int64_t now = now_ns();
      if (stalled_ticket_ != tail) {
        stalled_ticket_ = tail;
        stalled_since_ns_ = now;
        break;
      }
      if (now - stalled_since_ns_ < stall_timeout_ns_) break;
      h.lost.fetch_add(1, std::memory_order_relaxed);
      stalled_ticket_ = UINT64_MAX;
      ++tail;
      h.tail.store(tail, std::memory_order_release);
      continue;
    }
    Event copy;
    std::memcpy(reinterpret_cast<char*>(&copy) + kPayloadOffset,
                reinterpret_cast<const char*>(&slot) + kPayloadOffset, kPayloadBytes);
    copy.seq.store(want, std::memory_order_relaxed);
    // Seqlock check: a writer that was skipped as stalled and woke up may have published
    // over this slot while we copied it; then the copy is torn and is dropped as lost.
    std::atomic_thread_fence(std::memory_order_acquire);
    if (slot.seq.load(std::memory_order_relaxed) != want) {
      h.lost.fetch_add(1, std::memory_order_relaxed);
    } else {
      out.push_back(copy);
      ++taken;
    }
    ++tail;
    if (++since_publish == kTailPublishEvery) {
      h.tail.store(tail, std::memory_order_release);
      since_publish = 0;
    }
  }
  h.tail.store(tail, std::memory_order_release);
  return taken;
}

uint64_t EventRing::dropped() const noexcept {
  return header_->dropped.load(std::memory_order_relaxed);
}

uint64_t EventRing::lost() const noexcept { return header_->lost.load(std::memory_order_relaxed); }

uint64_t EventRing::pending() const noexcept {
  return header_->head.load(std::memory_order_relaxed) -
         header_->tail.load(std::memory_order_relaxed);
}

int64_t EventRing::progress(uint16_t loader, int64_t epoch) const noexcept {
  const uint64_t key = header_->progress[loader % kProgressSlots].load(std::memory_order_relaxed);
  if (key == 0 || (key & ~kProgressIndexMask) != progress_key(loader, epoch, 0)) return -1;
  return int64_t(key & kProgressIndexMask);
}

bool EventRing::claim_profile(uint16_t loader, int64_t now_ns, int64_t first_spacing_ns,
                              int64_t max_spacing_ns) noexcept {
  auto& slot = header_->profile[loader % kProgressSlots];
  const int64_t now_ms = std::max<int64_t>(0, (now_ns - header_->created_ns) / 1'000'000);
  uint64_t key = slot.load(std::memory_order_relaxed);
  for (;;) {
    uint32_t taken = 0;
    if (key != 0 && uint16_t(key >> 48) == loader) {
      if (now_ms < int64_t(key & kProfileNextMask)) return false;
      taken = uint32_t(key >> 40) & 0xff;
    }
    int64_t spacing = first_spacing_ns;
    for (uint32_t i = 0; i < taken && spacing < max_spacing_ns; ++i) spacing *= 2;
    spacing = std::min(spacing, max_spacing_ns);
    const uint64_t next = profile_key(loader, std::min<uint32_t>(taken + 1, 0xff),
                                      now_ms + spacing / 1'000'000);
    // A process that loses the race sees the winner's key, and with it a time to come.
    if (slot.compare_exchange_weak(key, next, std::memory_order_relaxed)) return true;
  }
}

uint16_t EventRing::next_loader_id() noexcept {
  for (;;) {
    const auto id =
        static_cast<uint16_t>(header_->next_loader_id.fetch_add(1, std::memory_order_relaxed) + 1);
    if (id != 0) return id;  // 0 means "unknown loader"
  }
}

uint32_t EventRing::watcher_pid() const noexcept { return header_->watcher_pid; }

}  // namespace dldoctor::trace
