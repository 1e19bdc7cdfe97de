// Pressure stall information (/proc/pressure/*): the share of time tasks waited for a resource.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace dldoctor::system {

/// avg10 of the "some" line of a /proc/pressure/<resource> text, in percent.
std::optional<double> parse_pressure_some_avg10(std::string_view text) noexcept;

/// The same from `<proc_root>/pressure/<resource>` ("cpu", "io", "memory"); empty without PSI.
std::optional<double> read_pressure(const std::string& proc_root, const std::string& resource);

}  // namespace dldoctor::system
