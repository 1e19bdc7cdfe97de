// /proc/<pid>/smaps_rollup: proportional set size and private dirty memory, the figures that
// show a forked worker's copy-on-write growth. The kernel walks every mapping to produce it,
// so the sampler reads it at a lower rate than the rest.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dldoctor::sample {

/// The smaps_rollup fields the sampler uses, in bytes.
struct SmapsRollup {
  std::optional<int64_t> pss_bytes;            ///< Pss
  std::optional<int64_t> private_dirty_bytes;  ///< Private_Dirty
};

/// Parses the text of an smaps_rollup file.
SmapsRollup parse_smaps_rollup(std::string_view text) noexcept;

}  // namespace dldoctor::sample
