// /proc/<pid>/status: context switches (voluntary = it blocked; involuntary = it was preempted,
// which climbs when more runnable threads than cores compete) and VmRSS.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dldoctor::sample {

/// The status fields the sampler uses; each empty when its line is absent (kernel threads and
/// zombies have no VmRSS).
struct StatusFields {
  std::optional<int64_t> voluntary_cs;     ///< voluntary_ctxt_switches, all threads
  std::optional<int64_t> involuntary_cs;   ///< nonvoluntary_ctxt_switches
  std::optional<int64_t> rss_bytes;        ///< VmRSS
};

/// Parses the text of a status file.
StatusFields parse_status(std::string_view text) noexcept;

}  // namespace dldoctor::sample
