// /proc/meminfo: MemAvailable, the kernel's estimate of memory a new allocation can get without
// swapping (free + reclaimable cache).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dldoctor::sample {

/// MemAvailable in bytes; empty on kernels before 3.14 or when the line is absent.
std::optional<int64_t> parse_mem_available(std::string_view text) noexcept;

}  // namespace dldoctor::sample
