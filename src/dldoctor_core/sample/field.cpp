#include "dldoctor_core/sample/field.hpp"

#include <charconv>
#include <limits>

namespace dldoctor::sample {
namespace {
void skip_blanks(std::string_view& s) noexcept {
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  s.remove_prefix(i);
}
}  // namespace

std::optional<int64_t> take_int(std::string_view& s) noexcept {
  std::string_view t = s;
  skip_blanks(t);
  int64_t value = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (ec != std::errc() || value < 0) return std::nullopt;
  t.remove_prefix(size_t(end - t.data()));
  s = t;
  return value;
}

std::optional<double> take_double(std::string_view& s) noexcept {
  std::string_view t = s;
  skip_blanks(t);
  double value = 0;
  auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), value);
  if (ec != std::errc()) return std::nullopt;
  t.remove_prefix(size_t(end - t.data()));
  s = t;
  return value;
}

std::optional<std::string_view> line_after(std::string_view text, std::string_view key) noexcept {
  size_t pos = 0;
  while (pos < text.size()) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    if (line.substr(0, key.size()) == key) return line.substr(key.size());
    pos = eol + 1;
  }
  return std::nullopt;
}

std::optional<int64_t> int_after(std::string_view text, std::string_view key) noexcept {
  auto rest = line_after(text, key);
  if (!rest) return std::nullopt;
  return take_int(*rest);
}

std::optional<int64_t> kib_after(std::string_view text, std::string_view key) noexcept {
  auto kib = int_after(text, key);
  if (!kib || *kib > std::numeric_limits<int64_t>::max() / 1024) return std::nullopt;
  return *kib * 1024;
}

}  // namespace dldoctor::sample
