// /proc/<pid>/io: rchar counts every byte read (page cache included); read_bytes only what
// had to come from storage. Their gap says whether a loader reads from cache or from disk.
// Reading it needs ptrace-read permission on the process: without it, both are unknown.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dldoctor::sample {

/// The io counters the sampler uses, in bytes since the process started.
struct IoFields {
  std::optional<int64_t> rchar;
  std::optional<int64_t> read_bytes;
};

/// Parses the text of an io file.
IoFields parse_io(std::string_view text) noexcept;

}  // namespace dldoctor::sample
