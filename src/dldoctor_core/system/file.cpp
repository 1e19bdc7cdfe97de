#include "dldoctor_core/system/file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>

namespace dldoctor::system {

namespace {
// /proc/self/mountinfo of a busy host with many containers is a few hundred KiB; nothing
// dldoctor reads is larger, and the bound keeps a misdirected path from reading a disk image.
constexpr size_t kMaxFileBytes = 4u << 20;
}  // namespace

std::optional<std::string> read_file(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
    if (out.size() >= kMaxFileBytes) break;
  }
  ::close(fd);
  return out;
}

std::string_view trim(std::string_view text) noexcept {
  const char* ws = " \t\r\n";
  auto b = text.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  auto e = text.find_last_not_of(ws);
  return text.substr(b, e - b + 1);
}

std::optional<int64_t> parse_int(std::string_view text) noexcept {
  text = trim(text);
  if (text.empty()) return std::nullopt;
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<int64_t> read_int(const std::string& path) {
  auto text = read_file(path);
  if (!text) return std::nullopt;
  return parse_int(*text);
}

std::string join_path(std::string_view dir, std::string_view name) {
  std::string out(dir);
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  while (!name.empty() && name.front() == '/') name.remove_prefix(1);
  if (name.empty()) return out;
  if (out.empty() || out.back() != '/') out += '/';
  out += name;
  return out;
}

bool path_exists(const std::string& path) noexcept {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace dldoctor::system
