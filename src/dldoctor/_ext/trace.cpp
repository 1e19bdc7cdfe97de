// Glue for dldoctor_core/trace.
#include <nanobind/nanobind.h>

#include "register.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {
void register_trace(nb::module_& m) { (void)m; }
}  // namespace dldoctor::ext
