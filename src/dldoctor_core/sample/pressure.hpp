// /proc/pressure/{cpu,io,memory} (PSI): the share of the last 10 s in which some task was
// stalled on that resource. Absent without CONFIG_PSI or with psi=0: unknown.
#pragma once

#include <optional>
#include <string_view>

namespace dldoctor::sample {

/// The "some avg10=" value, in percent; empty when absent.
std::optional<double> parse_pressure_some_avg10(std::string_view text) noexcept;

}  // namespace dldoctor::sample
