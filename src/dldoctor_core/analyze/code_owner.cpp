#include "dldoctor_core/analyze/code_owner.hpp"

namespace dldoctor::analyze {

namespace {
bool has(std::string_view hay, std::string_view needle) noexcept {
  return hay.find(needle) != std::string_view::npos;
}
}  // namespace

Owner owner_of(std::string_view file) noexcept {
  if (has(file, "/dldoctor/job/") || has(file, "/dldoctor/_inject/") ||
      has(file, "/dldoctor/watcher/"))
    return Owner::kDldoctor;
  for (std::string_view p : {"/site-packages/", "/dist-packages/"}) {
    const size_t at = file.rfind(p);
    if (at == std::string_view::npos) continue;
    const std::string_view rest = file.substr(at + p.size());
    if (rest.substr(0, 6) == "torch/") return Owner::kTorch;
    if (rest.substr(0, 9) == "dldoctor/") return Owner::kDldoctor;
    return Owner::kLibrary;
  }
  if (has(file, "/torch/utils/data/") || has(file, "/torch/_utils.py")) return Owner::kTorch;
  // The standard library: <frozen ...>, /usr/lib/python3.x/..., <prefix>/lib/python3.x/...
  if (file.substr(0, 1) == "<" || has(file, "/lib/python3.") || has(file, "/lib/python2."))
    return Owner::kLibrary;
  return Owner::kUser;
}

}  // namespace dldoctor::analyze
