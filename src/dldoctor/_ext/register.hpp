// One register_<area>() per area of dldoctor_core.
#pragma once

#include <nanobind/nanobind.h>

namespace dldoctor::ext {
void register_errors(nanobind::module_& m);
void register_system(nanobind::module_& m);
void register_sample(nanobind::module_& m);
void register_trace(nanobind::module_& m);
void register_batch_hooks(nanobind::module_& m);
void register_analyze(nanobind::module_& m);
void register_watchdog(nanobind::module_& m);
void register_monitor(nanobind::module_& m);
void register_attach(nanobind::module_& m);
void register_merge(nanobind::module_& m);
}  // namespace dldoctor::ext
