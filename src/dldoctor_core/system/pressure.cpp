#include "dldoctor_core/system/pressure.hpp"

#include <charconv>

#include "dldoctor_core/system/file.hpp"

namespace dldoctor::system {

std::optional<double> parse_pressure_some_avg10(std::string_view text) noexcept {
  // "some avg10=1.11 avg60=2.47 avg300=1.54 total=7064325"
  constexpr std::string_view kPrefix = "some avg10=";
  auto pos = text.find(kPrefix);
  if (pos == std::string_view::npos || (pos > 0 && text[pos - 1] != '\n')) return std::nullopt;
  std::string_view rest = text.substr(pos + kPrefix.size());
  auto end = rest.find_first_of(" \n");
  if (end != std::string_view::npos) rest = rest.substr(0, end);
  double value = 0;
  auto [p, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), value);
  if (ec != std::errc() || p != rest.data() + rest.size()) return std::nullopt;
  return value;
}

std::optional<double> read_pressure(const std::string& proc_root, const std::string& resource) {
  auto text = read_file(join_path(proc_root, "pressure/" + resource));
  if (!text) return std::nullopt;
  return parse_pressure_some_avg10(*text);
}

}  // namespace dldoctor::system
