// /proc/self/mountinfo: which filesystem a path lives on (type, source, options, device).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dldoctor::system {

/// One line of /proc/<pid>/mountinfo (see proc(5)), with octal escapes (\040 ...) decoded.
struct Mount {
  std::string device_numbers;  ///< "MAJ:MIN" of the filesystem (0:N for virtual ones)
  std::string root;            ///< path inside the filesystem that is mounted here
  std::string mount_point;
  std::string mount_options;   ///< per-mount options (rw,relatime ...)
  std::string fs_type;         ///< ext4, tmpfs, nfs4, fuse.s3fs, cgroup, cgroup2 ...
  std::string source;          ///< /dev/vda1, server:/export, tmpfs ...
  std::string super_options;   ///< per-superblock options (tmpfs size=..., cgroup v1 controllers)
};

/// Decodes the kernel's octal escapes (`\040` space, `\011` tab, `\012` newline, `\134` backslash).
std::string unescape_mount_field(std::string_view field);

/// One mountinfo line; empty when it does not have the documented shape.
std::optional<Mount> parse_mountinfo_line(std::string_view line);

/// Every well-formed line of a mountinfo file, in file order (later lines are mounted on top).
std::vector<Mount> parse_mountinfo(std::string_view text);

/// `<proc_root>/self/mountinfo`, parsed; empty when unreadable.
std::vector<Mount> read_mountinfo(const std::string& proc_root);

/// The mount that holds an absolute, symlink-free path: the longest mount point that is a
/// whole-component prefix of it; among equal ones the last (the one on top). Null when none.
const Mount* find_mount(const std::vector<Mount>& mounts, std::string_view path) noexcept;

}  // namespace dldoctor::system
