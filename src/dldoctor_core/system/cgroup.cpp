#include "dldoctor_core/system/cgroup.hpp"

#include <unistd.h>

#include <charconv>

#include "dldoctor_core/system/file.hpp"

namespace dldoctor::system {

namespace {

// v1 "unlimited" is PAGE_COUNTER_MAX pages, printed as 9223372036854771712 on 4 KiB pages; no
// real machine has 4 EiB, so anything at or above 2^62 is read as "no limit".
constexpr int64_t kUnlimitedMemory = int64_t{1} << 62;

std::vector<std::string> split(std::string_view text, char sep) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t end = text.find(sep, pos);
    if (end == std::string_view::npos) end = text.size();
    if (end > pos) out.emplace_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return out;
}

bool has(const std::vector<std::string>& v, std::string_view x) {
  for (const auto& s : v)
    if (s == x) return true;
  return false;
}

// "/a/b" under mount root "/a" is "/b"; a path outside the root (cgroup namespaces, bind
// mounts) is taken as already relative to the mount.
std::string relative_to_root(const std::string& path, const std::string& root) {
  if (root == "/" || root.empty()) return path;
  if (path.compare(0, root.size(), root) == 0 &&
      (path.size() == root.size() || path[root.size()] == '/'))
    return path.substr(root.size());
  return path;
}

}  // namespace

std::vector<CgroupLine> parse_proc_cgroup(std::string_view text) {
  std::vector<CgroupLine> out;
  for (const auto& line : split(text, '\n')) {
    auto a = line.find(':');
    auto b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    auto id = parse_int(std::string_view(line).substr(0, a));
    if (!id) continue;
    CgroupLine c;
    c.hierarchy = static_cast<int>(*id);
    c.controllers = split(std::string_view(line).substr(a + 1, b - a - 1), ',');
    c.path = line.substr(b + 1);
    if (c.path.empty() || c.path.front() != '/') continue;
    out.push_back(std::move(c));
  }
  return out;
}

Cgroups Cgroups::read(const std::string& proc_root) {
  auto text = read_file(join_path(proc_root, "self/cgroup"));
  return Cgroups(text ? parse_proc_cgroup(*text) : std::vector<CgroupLine>{},
                 read_mountinfo(proc_root));
}

std::pair<std::string, std::string> Cgroups::locate(std::string_view controller) const {
  const bool v2 = controller.empty();
  const CgroupLine* line = nullptr;
  for (const auto& l : lines_) {
    if (v2 ? (l.hierarchy == 0 && l.controllers.empty()) : has(l.controllers, controller)) {
      line = &l;
      break;
    }
  }
  if (!line) return {};
  auto mounts_hierarchy = [&](const Mount& m) {
    return v2 ? m.fs_type == "cgroup2"
              : m.fs_type == "cgroup" && has(split(m.super_options, ','), controller);
  };
  // Prefer a mount whose root holds the path (the usual case); any mount of the hierarchy will do.
  const Mount* chosen = nullptr;
  for (const auto& m : mounts_) {
    if (!mounts_hierarchy(m)) continue;
    bool holds = m.root == "/" || relative_to_root(line->path, m.root) != line->path;
    if (holds) {
      chosen = &m;
      break;
    }
    if (!chosen) chosen = &m;
  }
  if (!chosen) return {};
  std::string d = join_path(chosen->mount_point, relative_to_root(line->path, chosen->root));
  // A path that does not exist under the mount (a cgroup namespace seen from outside) still has
  // the mount point itself, which is what the process can see.
  if (!path_exists(d)) d = chosen->mount_point;
  return {d, chosen->mount_point};
}

std::string Cgroups::dir(std::string_view controller) const { return locate(controller).first; }

std::vector<std::string> Cgroups::chain(std::string_view controller) const {
  auto [d, top] = locate(controller);
  if (d.empty()) return {};
  std::vector<std::string> out{d};
  while (d.size() > top.size()) {
    auto slash = d.find_last_of('/');
    if (slash == std::string::npos || slash < top.size()) break;
    d.resize(slash);
    out.push_back(d);
  }
  return out;
}

std::string Cgroups::version() const {
  if (lines_.empty()) return "";
  bool v1 = false, v2 = false;
  for (const auto& m : mounts_) {
    if (m.fs_type == "cgroup") v1 = true;
    if (m.fs_type == "cgroup2") v2 = true;
  }
  if (v1 && v2) return "hybrid";
  if (v1) return "v1";
  if (v2) return "v2";
  return "";
}

std::optional<double> parse_cpu_max(std::string_view text) noexcept {
  text = trim(text);
  auto space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  auto quota = parse_int(text.substr(0, space));  // "max" fails to parse: no quota
  auto period = parse_int(text.substr(space + 1));
  return cfs_quota_cpus(quota, period);
}

std::optional<double> cfs_quota_cpus(std::optional<int64_t> quota_us,
                                     std::optional<int64_t> period_us) noexcept {
  if (!quota_us || !period_us || *quota_us <= 0 || *period_us <= 0) return std::nullopt;
  return static_cast<double>(*quota_us) / static_cast<double>(*period_us);
}

std::optional<int64_t> parse_memory_limit(std::string_view text) noexcept {
  auto v = parse_int(text);
  if (!v || *v < 0 || *v >= kUnlimitedMemory) return std::nullopt;
  return v;
}

std::optional<int64_t> parse_stat_field(std::string_view text, std::string_view key) noexcept {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ')
      return parse_int(line.substr(key.size() + 1));
    pos = end + 1;
  }
  return std::nullopt;
}

}  // namespace dldoctor::system
