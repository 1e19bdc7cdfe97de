// The findings model: what a rule concluded, with the numbers that prove it. Rules build
// these; reporters render them. Rules never format text for a terminal.
#pragma once

#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace dldoctor::report {

enum class Severity { kInfo = 0, kWarning = 1, kCritical = 2 };

/// "critical" | "warning" | "info", as in the JSON report.
inline const char* severity_name(Severity s) {
  switch (s) {
    case Severity::kCritical: return "critical";
    case Severity::kWarning: return "warning";
    default: return "info";
  }
}

/// A named number or text behind a finding, e.g. {"data_stall_fraction", 0.71}.
struct Evidence {
  std::string name;
  std::variant<double, std::string> value;
};

/// One diagnosis. `id` is from the stable vocabulary of DESIGN.md section 4.
struct Finding {
  std::string id;
  Severity severity = Severity::kInfo;
  std::string title;
  std::vector<Evidence> evidence;
  std::string fix;
  std::string why;
  int loader = -1;     ///< the loader it is about, -1 for the whole job
  double score = 0;    ///< orders findings of one severity: larger is more important

  Finding& add(std::string name, double value) {
    evidence.push_back({std::move(name), value});
    return *this;
  }
  Finding& add(std::string name, std::string value) {
    evidence.push_back({std::move(name), std::move(value)});
    return *this;
  }
};

}  // namespace dldoctor::report
