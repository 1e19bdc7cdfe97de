// Conversions of hang captures to Python, shared by the watchdog and monitor glue.
#pragma once

#include <nanobind/nanobind.h>

#include <vector>

#include "dldoctor_core/report/finding.hpp"
#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::ext {
/// A HangSnapshot as the dict that classify_hang() accepts back.
nanobind::dict hang_snapshot_to_dict(const watchdog::HangSnapshot& s);
/// Hang findings as finding dicts.
nanobind::list hang_findings_to_list(const std::vector<report::Finding>& findings);
}  // namespace dldoctor::ext
