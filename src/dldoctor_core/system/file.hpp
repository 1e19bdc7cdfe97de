// Small-file reading for /proc, /sys and cgroup files: every reader turns "missing or
// unreadable" into an empty optional here, so no caller can mistake it for a 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace dldoctor::system {

/// The whole content of a small file (procfs reports size 0, so it is read to EOF, up to 4 MiB);
/// empty when the file is missing or unreadable.
std::optional<std::string> read_file(const std::string& path);

/// A decimal integer with surrounding whitespace; empty for anything else ("max", "", "12ab").
std::optional<int64_t> parse_int(std::string_view text) noexcept;

/// The integer in a one-value file (cgroup knobs, sysfs attributes); empty when missing or not a number.
std::optional<int64_t> read_int(const std::string& path);

/// `text` without leading and trailing whitespace.
std::string_view trim(std::string_view text) noexcept;

/// `dir` + "/" + `name`, without doubling the slash.
std::string join_path(std::string_view dir, std::string_view name);

/// Whether a path exists (any kind of file).
bool path_exists(const std::string& path) noexcept;

}  // namespace dldoctor::system
