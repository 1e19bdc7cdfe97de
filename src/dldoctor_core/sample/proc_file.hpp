// Reading /proc files cheaply: one reused buffer, and pread on descriptors kept open across
// passes where the descriptor budget allows (opening a /proc file costs more than reading it).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dldoctor::sample {

/// A growable byte buffer reused for every read of a pass (no allocation once warm).
class ReadBuffer {
 public:
  /// Room for `capacity` bytes to begin with; grows by doubling when a file is larger.
  explicit ReadBuffer(size_t capacity = 4096) { bytes_.resize(capacity); }
  /// The storage, sized to the current capacity.
  char* data() noexcept { return bytes_.data(); }
  /// The current capacity in bytes.
  size_t capacity() const noexcept { return bytes_.size(); }
  /// Doubles the capacity (false when the allocation fails).
  bool grow() noexcept;

 private:
  std::string bytes_;
};

/// How many descriptors the sampler may keep open; the rest are opened per read. Bounded
/// because the sampler may live inside the user's process, next to a DataLoader that itself
/// needs many descriptors (file_descriptor sharing strategy).
class FdBudget {
 public:
  /// `limit` descriptors may be held at once.
  explicit FdBudget(int limit) noexcept : limit_(limit), left_(limit) {}
  /// Takes one descriptor from the budget; false when none is left.
  bool take() noexcept {
    if (left_ <= 0) return false;
    --left_;
    return true;
  }
  /// Takes one only while more than half the budget is left: for files read at a low rate,
  /// which gain less from a kept descriptor than those read every pass.
  bool take_spare() noexcept { return left_ > limit_ / 2 && take(); }
  /// Returns one descriptor to the budget.
  void give() noexcept { ++left_; }
  /// Descriptors still available.
  int left() const noexcept { return left_; }

 private:
  int limit_;
  int left_;
};

/// How a file's end is found. Most /proc files are one seq_file record (every /proc/<pid>/...
/// file we read, /proc/stat, /proc/meminfo, /proc/pressure/*): the kernel hands over all of it in
/// one read when the buffer is large enough, so a short read is the end and the extra read that
/// would return 0 is saved. Files of many records (/proc/vmstat) stop a read at a page boundary.
enum class Records { one, many };

/// Reads the whole file at `path` into `buf` with open/read/close; empty when it cannot be
/// opened or read (absent, exited, permission denied).
std::optional<std::string_view> read_whole(const char* path, ReadBuffer& buf,
                                           Records records = Records::one) noexcept;

/// Reads the whole of an open descriptor from offset 0 with pread; empty on error.
std::optional<std::string_view> pread_whole(int fd, ReadBuffer& buf,
                                            Records records = Records::one) noexcept;

/// One /proc file read again and again: through a kept-open descriptor (pread) when the budget
/// gave one, else open/read/close each time. A kept descriptor of a /proc/<pid> file stays
/// bound to that process, so a reused pid reads as an error, never as someone else's data.
class ProcFile {
 public:
  ProcFile() = default;
  /// A file at `path`; keeps it open when `budget` is non-null and has a descriptor left
  /// (more than half of it when `spare`).
  ProcFile(std::string path, FdBudget* budget, Records records = Records::one,
           bool spare = false) noexcept;
  ProcFile(ProcFile&& other) noexcept;
  ProcFile& operator=(ProcFile&& other) noexcept;
  ProcFile(const ProcFile&) = delete;
  ProcFile& operator=(const ProcFile&) = delete;
  ~ProcFile() { close(); }

  /// The whole file, viewed in `buf`; empty when it cannot be read.
  std::optional<std::string_view> read(ReadBuffer& buf) noexcept;
  /// The path this file reads.
  const std::string& path() const noexcept { return path_; }
  /// Whether a descriptor is held open.
  bool kept_open() const noexcept { return fd_ >= 0; }

 private:
  void close() noexcept;

  std::string path_;
  int fd_ = -1;
  Records records_ = Records::one;
  FdBudget* budget_ = nullptr;  // where a kept descriptor goes back to
};

/// A /proc directory listed again and again (/proc/<pid>/fd, /proc/<pid>/task, /proc): through a
/// kept-open descriptor rewound each time when the budget gave one, else opened per listing.
class ProcDir {
 public:
  ProcDir() = default;
  /// A directory at `path`; keeps it open when `budget` is non-null and has a descriptor left
  /// (more than half of it when `spare`).
  ProcDir(std::string path, FdBudget* budget, bool spare = false) noexcept;
  ProcDir(ProcDir&& other) noexcept;
  ProcDir& operator=(ProcDir&& other) noexcept;
  ProcDir(const ProcDir&) = delete;
  ProcDir& operator=(const ProcDir&) = delete;
  ~ProcDir() { close(); }

  /// Entries whose names do not start with '.'; empty when it cannot be listed.
  std::optional<int64_t> count(ReadBuffer& buf) noexcept;
  /// Appends the entries with all-digit names (pids, tids, fds) to `out`; false when it cannot
  /// be listed.
  bool numbers(ReadBuffer& buf, std::vector<int>& out) noexcept;

 private:
  /// Calls `on_name` for each entry; false when the directory cannot be read.
  template <typename F>
  bool each(ReadBuffer& buf, F&& on_name) noexcept;
  void close() noexcept;

  std::string path_;
  int fd_ = -1;
  FdBudget* budget_ = nullptr;
};

}  // namespace dldoctor::sample
