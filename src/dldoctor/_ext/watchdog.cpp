// Glue for dldoctor_core/watchdog.
#include <nanobind/nanobind.h>

#include "register.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {
void register_watchdog(nb::module_& m) { (void)m; }
}  // namespace dldoctor::ext
