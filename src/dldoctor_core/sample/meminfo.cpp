#include "dldoctor_core/sample/meminfo.hpp"

#include "dldoctor_core/sample/field.hpp"

namespace dldoctor::sample {

std::optional<int64_t> parse_mem_available(std::string_view text) noexcept {
  return kib_after(text, "MemAvailable:");
}

}  // namespace dldoctor::sample
