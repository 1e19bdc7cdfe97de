// dldoctor::Error crosses into Python as dldoctor._ext.CoreError (a DldoctorError base).
#include <nanobind/nanobind.h>

#include "dldoctor_core/common/error.hpp"
#include "register.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {
void register_errors(nb::module_& m) {
  static nb::exception<dldoctor::Error> core_error(m, "CoreError");
}
}  // namespace dldoctor::ext
