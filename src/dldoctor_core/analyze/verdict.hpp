// Ordering findings and naming the verdict: most important first, critical before warning
// before info, then by score (the share of the stall a finding explains).
#pragma once

#include <string>
#include <vector>

#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze {

/// Sorts most important first (stable: equal findings keep the rules' order).
void order_findings(std::vector<report::Finding>& findings);

/// The id of the most important critical finding, else "healthy".
std::string verdict(const std::vector<report::Finding>& findings);

}  // namespace dldoctor::analyze
