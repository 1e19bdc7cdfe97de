// Severity first (a critical finding is the bottleneck or the failure), then the tier (a
// hang's cause before the hang, the hang before a failure, a failure before a bottleneck),
// then the score within the tier.
#include "dldoctor_core/analyze/verdict.hpp"

#include <algorithm>
#include <set>

namespace dldoctor::analyze {

bool ranks_before(const report::Finding& a, const report::Finding& b) noexcept {
  if (a.severity != b.severity) return a.severity > b.severity;
  if (a.tier != b.tier) return a.tier > b.tier;
  return a.score > b.score;
}

void order_findings(std::vector<report::Finding>& findings) {
  std::stable_sort(findings.begin(), findings.end(), ranks_before);
}

std::string verdict(const std::vector<report::Finding>& findings) {
  const report::Finding* top = nullptr;
  for (const report::Finding& f : findings)
    if (f.severity == report::Severity::kCritical && (!top || ranks_before(f, *top))) top = &f;
  return top ? top->id : "healthy";
}

namespace {
bool lost_batches(const report::Finding& f) {
  return std::any_of(f.evidence.begin(), f.evidence.end(), [](const report::Evidence& e) {
    const double* n = std::get_if<double>(&e.value);
    return e.name == kBatchesLost && n && *n > 0;
  });
}
}  // namespace

std::vector<report::Finding> with_hang(std::vector<report::Finding> run,
                                       const std::vector<report::Finding>& hang) {
  std::set<std::string> hang_ids;
  bool critical_hang = false;
  for (const report::Finding& f : hang) {
    hang_ids.insert(f.id);
    critical_hang = critical_hang || f.severity == report::Severity::kCritical;
  }
  std::vector<report::Finding> out;
  for (report::Finding& f : run) {
    if (hang_ids.count(f.id)) continue;
    if (critical_hang && f.severity == report::Severity::kCritical && lost_batches(f)) {
      f.tier = report::Tier::kLostBatchHang;
      f.why +=
          " The hang is its consequence: the main process waits for a batch that no "
          "worker will send.";
    }
    out.push_back(std::move(f));
  }
  out.insert(out.end(), hang.begin(), hang.end());
  order_findings(out);
  return out;
}

Decision decide(std::vector<report::Finding> findings, bool any_loader, bool hung,
                const std::string& not_healthy) {
  order_findings(findings);
  Decision d;
  if (!any_loader && !hung) {
    d.verdict = "unknown";
    d.note = kNoLoaderNote;
  } else {
    d.verdict = verdict(findings);
    if (d.verdict == "healthy" && !hung && !not_healthy.empty()) {
      d.verdict = "unknown";
      d.note = not_healthy;
    }
  }
  d.findings = std::move(findings);
  return d;
}

}  // namespace dldoctor::analyze
