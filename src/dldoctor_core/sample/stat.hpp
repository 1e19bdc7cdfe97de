// /proc/<pid>/stat and /proc/<pid>/task/<tid>/stat: state, parent, CPU ticks, threads, RSS.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dldoctor::sample {

/// The fields of a stat line the sampler uses. State and parent are required; a line cut short
/// leaves the later fields empty.
struct StatFields {
  std::string comm;                      ///< between the first '(' and the last ')'
  char state = '?';                      ///< R S D Z T t I X ...
  int ppid = 0;
  std::optional<int64_t> minor_faults;   ///< field 10: page faults served without I/O (a
                                         ///< copy-on-write break is one)
  std::optional<int64_t> major_faults;   ///< field 12: page faults that read from storage
  std::optional<int64_t> utime_ticks;    ///< field 14, in clock ticks (sysconf(_SC_CLK_TCK))
  std::optional<int64_t> stime_ticks;    ///< field 15
  std::optional<int64_t> num_threads;    ///< field 20
  std::optional<int64_t> start_ticks;    ///< field 22, since boot: a pid with another start is
                                         ///< another process
  std::optional<int64_t> rss_pages;      ///< field 24, the same count as VmRSS in status
};

/// Parses one stat line. The command name may hold spaces and parentheses, so the fields are
/// taken after the *last* ')'. Empty when there is no ')' or no state and parent after it.
std::optional<StatFields> parse_stat(std::string_view text) noexcept;

}  // namespace dldoctor::sample
