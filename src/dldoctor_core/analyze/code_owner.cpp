#include "dldoctor_core/analyze/code_owner.hpp"

namespace dldoctor::analyze {

Owner owner_of(std::string_view file) noexcept {
  if (contains(file, "/dldoctor/job/") || contains(file, "/dldoctor/_inject/") ||
      contains(file, "/dldoctor/watcher/"))
    return Owner::kDldoctor;
  for (std::string_view p : {"/site-packages/", "/dist-packages/"}) {
    const size_t at = file.rfind(p);
    if (at == std::string_view::npos) continue;
    const std::string_view rest = file.substr(at + p.size());
    if (rest.substr(0, 6) == "torch/") return Owner::kTorch;
    if (rest.substr(0, 9) == "dldoctor/") return Owner::kDldoctor;
    return Owner::kLibrary;
  }
  if (contains(file, "/torch/utils/data/") || contains(file, "/torch/_utils.py"))
    return Owner::kTorch;
  // The standard library: <frozen ...>, /usr/lib/python3.x/..., <prefix>/lib/python3.x/...
  if (file.substr(0, 1) == "<" || contains(file, "/lib/python3.") ||
      contains(file, "/lib/python2."))
    return Owner::kLibrary;
  return Owner::kUser;
}

}  // namespace dldoctor::analyze
