#include "dldoctor_core/sample/wchan.hpp"

namespace dldoctor::sample {

std::string parse_wchan(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (text.empty() || text == "0") return {};
  return std::string(text);
}

}  // namespace dldoctor::sample
