// Glue for dldoctor_core/system.
#include <nanobind/nanobind.h>

#include "register.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {
void register_system(nb::module_& m) { (void)m; }
}  // namespace dldoctor::ext
