#include "dldoctor_core/sample/proc_file.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <new>

namespace dldoctor::sample {

bool ReadBuffer::grow() noexcept {
  try {
    bytes_.resize(bytes_.size() * 2);
    return true;
  } catch (const std::bad_alloc&) {
    return false;
  }
}

std::optional<std::string_view> pread_whole(int fd, ReadBuffer& buf, Records records) noexcept {
  size_t used = 0;
  for (;;) {
    if (used == buf.capacity() && !buf.grow()) return std::nullopt;
    ssize_t n = ::pread(fd, buf.data() + used, buf.capacity() - used, off_t(used));
    if (n < 0) {
      if (errno == EINTR) continue;
      return std::nullopt;
    }
    if (n == 0) break;
    const bool short_read = size_t(n) < buf.capacity() - used;
    used += size_t(n);
    if (short_read && records == Records::one) break;
  }
  // A /proc file of a process that has gone reads as empty or as an error: both unknown.
  if (used == 0) return std::nullopt;
  return std::string_view(buf.data(), used);
}

std::optional<std::string_view> read_whole(const char* path, ReadBuffer& buf,
                                           Records records) noexcept {
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  auto text = pread_whole(fd, buf, records);
  ::close(fd);
  return text;
}

ProcFile::ProcFile(std::string path, FdBudget* budget, Records records, bool spare) noexcept
    : path_(std::move(path)), records_(records) {
  if (budget == nullptr || !(spare ? budget->take_spare() : budget->take())) return;
  fd_ = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) {
    budget->give();
    return;
  }
  budget_ = budget;
}

ProcFile::ProcFile(ProcFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(other.fd_),
      records_(other.records_),
      budget_(other.budget_) {
  other.fd_ = -1;
  other.budget_ = nullptr;
}

ProcFile& ProcFile::operator=(ProcFile&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    records_ = other.records_;
    budget_ = other.budget_;
    other.fd_ = -1;
    other.budget_ = nullptr;
  }
  return *this;
}

void ProcFile::close() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  if (budget_ != nullptr) budget_->give();
  budget_ = nullptr;
}

std::optional<std::string_view> ProcFile::read(ReadBuffer& buf) noexcept {
  if (fd_ >= 0) return pread_whole(fd_, buf, records_);
  if (path_.empty()) return std::nullopt;
  return read_whole(path_.c_str(), buf, records_);
}

ProcDir::ProcDir(std::string path, FdBudget* budget, bool spare) noexcept
    : path_(std::move(path)) {
  if (budget == nullptr || !(spare ? budget->take_spare() : budget->take())) return;
  fd_ = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd_ < 0) {
    budget->give();
    return;
  }
  budget_ = budget;
}

ProcDir::ProcDir(ProcDir&& other) noexcept
    : path_(std::move(other.path_)), fd_(other.fd_), budget_(other.budget_) {
  other.fd_ = -1;
  other.budget_ = nullptr;
}

ProcDir& ProcDir::operator=(ProcDir&& other) noexcept {
  if (this != &other) {
    close();
    path_ = std::move(other.path_);
    fd_ = other.fd_;
    budget_ = other.budget_;
    other.fd_ = -1;
    other.budget_ = nullptr;
  }
  return *this;
}

void ProcDir::close() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  if (budget_ != nullptr) budget_->give();
  budget_ = nullptr;
}

template <typename F>
bool ProcDir::each(ReadBuffer& buf, F&& on_name) noexcept {
  int fd = fd_;
  if (fd >= 0) {
    if (::lseek(fd, 0, SEEK_SET) != 0) return false;
  } else {
    if (path_.empty()) return false;
    fd = ::open(path_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return false;
  }
  // getdents64 straight into the pass's buffer: readdir() would allocate a DIR each time.
  bool ok = true;
  for (;;) {
    long n = ::syscall(SYS_getdents64, fd, buf.data(), buf.capacity());
    if (n < 0) {
      ok = false;  // the process has gone (ENOENT) or the listing is refused
      break;
    }
    if (n == 0) break;
    for (long off = 0; off < n;) {
      auto* e = reinterpret_cast<const dirent64*>(buf.data() + off);
      on_name(static_cast<const char*>(e->d_name));
      off += e->d_reclen;
    }
  }
  if (fd != fd_) ::close(fd);
  return ok;
}

std::optional<int64_t> ProcDir::count(ReadBuffer& buf) noexcept {
  int64_t n = 0;
  if (!each(buf, [&](const char* name) { n += name[0] != '.'; })) return std::nullopt;
  return n;
}

bool ProcDir::numbers(ReadBuffer& buf, std::vector<int>& out) noexcept {
  return each(buf, [&](const char* name) {
    if (name[0] < '1' || name[0] > '9') return;
    int64_t v = 0;
    for (const char* c = name; *c; ++c) {
      if (*c < '0' || *c > '9' || v > 0x7fffffff / 10) return;
      v = v * 10 + (*c - '0');
    }
    out.push_back(int(v));
  });
}

}  // namespace dldoctor::sample
