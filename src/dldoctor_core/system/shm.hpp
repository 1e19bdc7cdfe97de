// /dev/shm: its size (statvfs) and how it is mounted (mountinfo).
#pragma once

#include <string>
#include <vector>

#include "dldoctor_core/system/facts.hpp"
#include "dldoctor_core/system/mountinfo.hpp"

namespace dldoctor::system {

/// Size, free space, fs type and superblock options of the filesystem at `path`
/// (where tmpfs keeps its `size=`); sizes empty when statvfs fails.
ShmFacts read_shm(const std::string& path, const std::vector<Mount>& mounts);

}  // namespace dldoctor::system
