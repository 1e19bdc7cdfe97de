#include "dldoctor_core/system/mountinfo.hpp"

#include "dldoctor_core/system/file.hpp"

namespace dldoctor::system {

namespace {

std::vector<std::string_view> split_spaces(std::string_view line) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && line[i] == ' ') ++i;
    size_t start = i;
    while (i < line.size() && line[i] != ' ') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

bool is_octal(char c) noexcept { return c >= '0' && c <= '7'; }

// "/a" is a prefix of "/a/b" and "/a", not of "/ab"; "/" is a prefix of everything.
bool is_path_prefix(std::string_view prefix, std::string_view path) noexcept {
  if (prefix == "/") return !path.empty() && path.front() == '/';
  if (path.substr(0, prefix.size()) != prefix) return false;
  return path.size() == prefix.size() || path[prefix.size()] == '/';
}

}  // namespace

std::string unescape_mount_field(std::string_view field) {
  std::string out;
  out.reserve(field.size());
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size() && is_octal(field[i + 1]) &&
        is_octal(field[i + 2]) && is_octal(field[i + 3])) {
      out += static_cast<char>((field[i + 1] - '0') * 64 + (field[i + 2] - '0') * 8 +
                               (field[i + 3] - '0'));
      i += 3;
    } else {
      out += field[i];
    }
  }
  return out;
}

std::optional<Mount> parse_mountinfo_line(std::string_view line) {
  // id parent MAJ:MIN root mount_point mount_options [optional fields...] - fstype source super
  auto f = split_spaces(line);
  size_t dash = 6;
  while (dash < f.size() && f[dash] != "-") ++dash;
  if (f.size() < 6 || dash >= f.size() || dash + 2 >= f.size()) return std::nullopt;
  Mount m;
  m.device_numbers = std::string(f[2]);
  m.root = unescape_mount_field(f[3]);
  m.mount_point = unescape_mount_field(f[4]);
  m.mount_options = std::string(f[5]);
  m.fs_type = unescape_mount_field(f[dash + 1]);
  m.source = unescape_mount_field(f[dash + 2]);
  if (dash + 3 < f.size()) m.super_options = unescape_mount_field(f[dash + 3]);
  if (m.mount_point.empty() || m.mount_point.front() != '/') return std::nullopt;
  return m;
}

std::vector<Mount> parse_mountinfo(std::string_view text) {
  std::vector<Mount> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    if (auto m = parse_mountinfo_line(text.substr(pos, end - pos))) out.push_back(std::move(*m));
    pos = end + 1;
  }
  return out;
}

std::vector<Mount> read_mountinfo(const std::string& proc_root) {
  auto text = read_file(join_path(proc_root, "self/mountinfo"));
  if (!text) return {};
  return parse_mountinfo(*text);
}

const Mount* find_mount(const std::vector<Mount>& mounts, std::string_view path) noexcept {
  const Mount* best = nullptr;
  for (const auto& m : mounts) {
    if (!is_path_prefix(m.mount_point, path)) continue;
    if (!best || m.mount_point.size() >= best->mount_point.size()) best = &m;
  }
  return best;
}

}  // namespace dldoctor::system
