#include "dldoctor_core/sample/vmstat.hpp"

#include "dldoctor_core/sample/field.hpp"

namespace dldoctor::sample {

SwapCounts parse_vmstat(std::string_view text) noexcept {
  return SwapCounts{int_after(text, "pswpin "), int_after(text, "pswpout ")};
}

}  // namespace dldoctor::sample
