#include "dldoctor_core/sample/status.hpp"

#include "dldoctor_core/sample/field.hpp"

namespace dldoctor::sample {

StatusFields parse_status(std::string_view text) noexcept {
  return StatusFields{int_after(text, "voluntary_ctxt_switches:"),
                      int_after(text, "nonvoluntary_ctxt_switches:"),
                      kib_after(text, "VmRSS:")};
}

}  // namespace dldoctor::sample
