#include "dldoctor_core/sample/schedstat.hpp"

#include "dldoctor_core/sample/field.hpp"

namespace dldoctor::sample {

std::optional<SchedStat> parse_schedstat(std::string_view text) noexcept {
  auto run = take_int(text);
  auto wait = take_int(text);
  if (!run || !wait) return std::nullopt;
  return SchedStat{*run, *wait, take_int(text)};
}

}  // namespace dldoctor::sample
