#include "dldoctor_core/sample/io.hpp"

#include "dldoctor_core/sample/field.hpp"

namespace dldoctor::sample {

IoFields parse_io(std::string_view text) noexcept {
  return IoFields{int_after(text, "rchar:"), int_after(text, "read_bytes:")};
}

}  // namespace dldoctor::sample
