// Most important first; the verdict is the top critical finding.
#include "dldoctor_core/analyze/verdict.hpp"

#include <algorithm>

namespace dldoctor::analyze {

namespace {
bool before(const report::Finding& a, const report::Finding& b) {
  if (a.severity != b.severity) return a.severity > b.severity;
  return a.score > b.score;
}
}  // namespace

void order_findings(std::vector<report::Finding>& findings) {
  std::stable_sort(findings.begin(), findings.end(), before);
}

std::string verdict(const std::vector<report::Finding>& findings) {
  const report::Finding* top = nullptr;
  for (const report::Finding& f : findings)
    if (f.severity == report::Severity::kCritical && (!top || before(f, *top))) top = &f;
  return top ? top->id : "healthy";
}

}  // namespace dldoctor::analyze
