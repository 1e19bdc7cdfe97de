// Small number parsers shared by the /proc readers: no allocation, no locale, no exceptions.
// A field that is absent or malformed is empty, so it reaches the snapshot as "unknown".
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace dldoctor::sample {

/// Skips spaces and tabs at the front of `s`, then takes a non-negative decimal integer and
/// advances `s` past it; empty (and `s` unchanged) when there is none or it overflows int64.
std::optional<int64_t> take_int(std::string_view& s) noexcept;

/// Takes a decimal number such as `1.35` after optional spaces, advancing `s` past it.
std::optional<double> take_double(std::string_view& s) noexcept;

/// The text after `key` on the first line that starts with `key` (key includes its separator,
/// e.g. "VmRSS:" or "pswpin "), up to the end of that line; empty when no line starts so.
std::optional<std::string_view> line_after(std::string_view text, std::string_view key) noexcept;

/// The integer on the line that starts with `key`, as in "VmRSS:	  1764 kB" -> 1764.
std::optional<int64_t> int_after(std::string_view text, std::string_view key) noexcept;

/// As int_after, for a value in kB, returned in bytes.
std::optional<int64_t> kib_after(std::string_view text, std::string_view key) noexcept;

}  // namespace dldoctor::sample
