// Glue for dldoctor_core/sample.
#include <nanobind/nanobind.h>

#include "register.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {
void register_sample(nb::module_& m) { (void)m; }
}  // namespace dldoctor::ext
