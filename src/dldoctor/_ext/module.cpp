// The extension's body is only the list of areas; each area's glue lives in its own file.
#include <nanobind/nanobind.h>

#include "register.hpp"

NB_MODULE(_ext, m) {
  m.doc() = "dldoctor's C++ core (glue only)";
  dldoctor::ext::register_errors(m);
  dldoctor::ext::register_system(m);
  dldoctor::ext::register_sample(m);
  dldoctor::ext::register_trace(m);
  dldoctor::ext::register_batch_hooks(m);
  dldoctor::ext::register_analyze(m);
  dldoctor::ext::register_watchdog(m);
  dldoctor::ext::register_monitor(m);
  dldoctor::ext::register_attach(m);
  dldoctor::ext::register_merge(m);
}
