// /proc/vmstat: pages swapped in and out since boot; their rates say the machine is swapping.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dldoctor::sample {

/// Swap counters, in pages since boot.
struct SwapCounts {
  std::optional<int64_t> pswpin;
  std::optional<int64_t> pswpout;
};

/// Parses the text of /proc/vmstat.
SwapCounts parse_vmstat(std::string_view text) noexcept;

}  // namespace dldoctor::sample
