#include "dldoctor_core/sample/proc_file.hpp"

#include <fcntl.h>
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

ProcFile::ProcFile(std::string path, FdBudget* budget, Records records) noexcept
    : path_(std::move(path)), records_(records) {
  if (budget == nullptr || !budget->take()) return;
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

}  // namespace dldoctor::sample
