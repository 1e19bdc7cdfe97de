// The cgroups this process is in (v1 per controller, v2 unified) and the limits they set.
// A limit anywhere up the tree binds, so readers walk from the process's cgroup to the root
// of the mounted hierarchy and keep the tightest one.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dldoctor_core/system/mountinfo.hpp"

namespace dldoctor::system {

/// One line of /proc/<pid>/cgroup: "4:memory:/docker/abc" or "0::/user.slice".
struct CgroupLine {
  int hierarchy = 0;                     ///< 0 = the v2 unified hierarchy
  std::vector<std::string> controllers;  ///< empty for v2
  std::string path;
};

/// Every well-formed line of /proc/<pid>/cgroup.
std::vector<CgroupLine> parse_proc_cgroup(std::string_view text);

/// This process's cgroups, located in the mounted hierarchies.
class Cgroups {
 public:
  /// Reads `<proc_root>/self/cgroup` and `<proc_root>/self/mountinfo`.
  static Cgroups read(const std::string& proc_root);
  /// From recorded contents (tests).
  Cgroups(std::vector<CgroupLine> lines, std::vector<Mount> mounts)
      : lines_(std::move(lines)), mounts_(std::move(mounts)) {}

  /// Directory of this process's cgroup for a v1 controller ("cpu", "memory"), or of the v2
  /// cgroup when `controller` is empty; "" when that hierarchy is not mounted or not listed.
  std::string dir(std::string_view controller) const;
  /// The directories from `dir(controller)` up to its hierarchy's mount point, leaf first.
  std::vector<std::string> chain(std::string_view controller) const;
  /// "v1", "v2", "hybrid" (v1 controllers with a v2 mount beside), "" when unknown.
  std::string version() const;
  /// The mount table read alongside (empty when unreadable).
  const std::vector<Mount>& mounts() const noexcept { return mounts_; }
  /// Whether /proc/self/cgroup could be read at all.
  bool known() const noexcept { return !lines_.empty(); }

 private:
  // (this process's cgroup directory, its hierarchy's mount point), both "" when not found.
  std::pair<std::string, std::string> locate(std::string_view controller) const;

  std::vector<CgroupLine> lines_;
  std::vector<Mount> mounts_;
};

/// A CPU quota in CPUs from cgroup v2 `cpu.max` ("50000 100000" -> 0.5); empty for "max".
std::optional<double> parse_cpu_max(std::string_view text) noexcept;

/// A CPU quota in CPUs from cgroup v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us`; empty for -1.
std::optional<double> cfs_quota_cpus(std::optional<int64_t> quota_us,
                                     std::optional<int64_t> period_us) noexcept;

/// A memory limit from v1 `memory.limit_in_bytes` or v2 `memory.max`; empty for "max" and for
/// v1's "unlimited", which is a huge page-aligned number near 2^63.
std::optional<int64_t> parse_memory_limit(std::string_view text) noexcept;

/// A named counter from a `memory.stat` file ("total_inactive_file 1234").
std::optional<int64_t> parse_stat_field(std::string_view text, std::string_view key) noexcept;

}  // namespace dldoctor::system
