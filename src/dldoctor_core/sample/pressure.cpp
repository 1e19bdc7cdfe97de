#include "dldoctor_core/sample/pressure.hpp"

#include "dldoctor_core/sample/field.hpp"

namespace dldoctor::sample {

std::optional<double> parse_pressure_some_avg10(std::string_view text) noexcept {
  auto rest = line_after(text, "some avg10=");
  if (!rest) return std::nullopt;
  auto v = take_double(*rest);
  if (!v || *v < 0) return std::nullopt;
  return v;
}

}  // namespace dldoctor::sample
