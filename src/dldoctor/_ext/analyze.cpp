// Glue for dldoctor_core/analyze.
#include <nanobind/nanobind.h>

#include "register.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {
void register_analyze(nb::module_& m) { (void)m; }
}  // namespace dldoctor::ext
