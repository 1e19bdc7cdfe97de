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
    case Severity::kCritical:
      return "critical";
    case Severity::kWarning:
      return "warning";
    default:
      return "info";
  }
}

/// Where a finding ranks among the findings of its severity, before its score: what the
/// reader must act on first. Within a tier the score orders findings (larger first), and
/// equal ones keep the rules' order (most fundamental first).
enum class Tier {
  /// The default: a cause or a risk ranked by its score (for a bottleneck, the share of the
  /// loop's stall it explains).
  kMeasure = 0,
  /// A worker died: the loader fails, and a finding that names why (shm_exhausted for a bus
  /// error) ranks above it.
  kDeath = 1,
  /// The job failed, or a worker could not send a batch, and the finding names why (no room
  /// in /dev/shm, no descriptor, no GPU memory): above every throughput finding.
  kFailure = 2,
  /// The hang doctor's diagnosis of a stall: nothing else matters while no batch comes.
  kHang = 3,
  /// As kHang, about the process that holds the batch the main process waits for.
  kHangAwaited = 4,
  /// A batch a worker lost (it could not be sent) in a run that then hung: the cause of the
  /// hang, so above the hang's own diagnosis.
  kLostBatchHang = 5,
};

/// A named number or text behind a finding, e.g. {"data_stall_fraction", 0.71}.
struct Evidence {
  std::string name;
  std::variant<double, std::string> value;
};

/// What a rule decided about a finding beside its words: how it ranks.
struct Rank {
  Severity severity = Severity::kInfo;
  Tier tier = Tier::kMeasure;
  double score = 0;  ///< orders findings of one severity and tier: larger is more important
};

/// One diagnosis. `id` is from the stable vocabulary of DESIGN.md section 4.
struct Finding {
  std::string id;
  Severity severity = Severity::kInfo;
  std::string title;
  std::vector<Evidence> evidence;
  std::string fix;
  std::string why;
  int loader = -1;             ///< the loader it is about, -1 for the whole job
  int rank = -1;               ///< the rank it is about (multi-rank jobs), -1 none or the job
  Tier tier = Tier::kMeasure;  ///< ranks findings of one severity before the score
  double score = 0;  ///< orders findings of one severity and tier: larger is more important

  Finding& add(std::string name, double value) {
    evidence.push_back({std::move(name), value});
    return *this;
  }
  Finding& add(std::string name, std::string value) {
    evidence.push_back({std::move(name), std::move(value)});
    return *this;
  }
};

/// A finding of `id` about `loader` (-1: the job) ranked as `rank`, its words to be written.
inline Finding make_finding(std::string id, int loader, const Rank& rank) {
  Finding f;
  f.id = std::move(id);
  f.severity = rank.severity;
  f.tier = rank.tier;
  f.score = rank.score;
  f.loader = loader;
  return f;
}

}  // namespace dldoctor::report
