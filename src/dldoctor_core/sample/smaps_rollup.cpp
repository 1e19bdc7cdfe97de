#include "dldoctor_core/sample/smaps_rollup.hpp"

#include "dldoctor_core/sample/field.hpp"

namespace dldoctor::sample {

SmapsRollup parse_smaps_rollup(std::string_view text) noexcept {
  // "Pss:" with its colon never matches Pss_Anon:/Pss_Dirty: lines.
  return SmapsRollup{kib_after(text, "Pss:"), kib_after(text, "Private_Dirty:")};
}

}  // namespace dldoctor::sample
