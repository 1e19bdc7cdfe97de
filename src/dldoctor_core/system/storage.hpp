// The storage behind a data directory: its filesystem, its disk, how many files and bytes it
// holds, and how fast it reads when the page cache does not help.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dldoctor_core/system/facts.hpp"

namespace dldoctor::system {

/// Whether a filesystem type (and, for FUSE, its source) is a network or remote one:
/// nfs, cifs, lustre, gpfs, beegfs, ceph, glusterfs, and fuse.* mounts of s3fs, gcsfuse,
/// sshfs, rclone ... or with a remote-looking source (host:/path, //host/share, s3://bucket).
bool is_network_fs(std::string_view fs_type, std::string_view source);

/// The disk behind "MAJ:MIN" from `<sys_root>/dev/block/MAJ:MIN`, a partition resolved to
/// its parent disk (vda1 -> vda); "" when it is not a block device.
std::string block_device_name(const std::string& device_numbers, const std::string& sys_root);

/// `<sys_root>/block/<disk>/queue/rotational`; empty when unreadable.
std::optional<bool> read_rotational(const std::string& disk, const std::string& sys_root);

/// Everything about the storage at `path` (a directory or one file). The file walk stops after
/// `max_files` files or half of `max_seconds`; the read probe runs in what is left. Throws
/// dldoctor::Error when `path` does not exist or cannot be read.
StorageFacts probe_storage(const std::string& path, double max_seconds = 2.0,
                           int64_t max_files = 100000, const std::string& proc_root = "/proc",
                           const std::string& sys_root = "/sys");

}  // namespace dldoctor::system
