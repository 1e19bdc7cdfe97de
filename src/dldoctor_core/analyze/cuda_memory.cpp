// The batch-size estimator behind the fixes of cuda_oom and cuda_oom_risk, and the reader of
// torch's out-of-memory text.
#include "dldoctor_core/analyze/cuda_memory.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "dldoctor_core/analyze/text.hpp"

namespace dldoctor::analyze {

std::optional<BatchFit> largest_fitting_batch(const std::vector<PeakSample>& peaks,
                                              int64_t total_bytes) noexcept {
  if (total_bytes <= 0) return std::nullopt;
  // One point per batch size: the highest peak (a step's peak varies with the data), the
  // lowest baseline; a failed size keeps its lower bound unless a success measured more.
  struct Point {
    double peak = 0;
    std::optional<double> baseline;
    bool failed = false;
  };
  std::map<int, Point> by_size;
  int smallest_failed = 0;
  for (const PeakSample& p : peaks) {
    if (p.batch_size <= 0 || p.peak_bytes <= 0) continue;
    Point& pt = by_size[p.batch_size];
    pt.peak = std::max(pt.peak, double(p.peak_bytes));
    if (p.baseline_bytes && *p.baseline_bytes >= 0)
      pt.baseline =
          std::min(pt.baseline.value_or(double(*p.baseline_bytes)), double(*p.baseline_bytes));
    if (p.lower_bound) {
      pt.failed = true;
      if (!smallest_failed || p.batch_size < smallest_failed) smallest_failed = p.batch_size;
    }
  }
  if (by_size.empty()) return std::nullopt;

  BatchFit fit;
  fit.budget_bytes = int64_t(double(total_bytes) * (1.0 - kCudaKeepFreeFraction));
  fit.batch_sizes = int(by_size.size());
  bool fitted = false;
  if (by_size.size() >= 2) {
    double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (const auto& [bs, pt] : by_size) {
      n += 1, sx += bs, sy += pt.peak, sxx += double(bs) * bs, sxy += double(bs) * pt.peak;
    }
    const double den = n * sxx - sx * sx;
    if (den > 0) {
      const double slope = (n * sxy - sx * sy) / den;
      const double intercept = (sy - slope * sx) / n;
      if (slope > 0 && intercept >= 0) {
        fit.per_sample_bytes = slope;
        fit.fixed_bytes = intercept;
        fitted = true;
      } else if (slope > 0) {
        // A negative fixed part is noise around a small one: count it all per sample, the
        // steepest ratio of the points (the safe side).
        for (const auto& [bs, pt] : by_size)
          fit.per_sample_bytes = std::max(fit.per_sample_bytes, pt.peak / bs);
        fit.fixed_bytes = 0;
        fitted = true;
      }
    }
  }
  if (!fitted) {
    // One batch size (or peaks that do not grow with it): the largest size measured, its
    // fixed part being what stays allocated between steps.
    const auto& [bs, pt] = *by_size.rbegin();
    const double fixed = pt.baseline && *pt.baseline < pt.peak ? *pt.baseline : 0.0;
    fit.fixed_bytes = fixed;
    fit.per_sample_bytes = (pt.peak - fixed) / bs;
    fit.batch_sizes = 1;
  }
  if (!(fit.per_sample_bytes > 0)) return std::nullopt;
  const double room = double(fit.budget_bytes) - fit.fixed_bytes;
  fit.largest_batch_size =
      room > 0 ? int(std::min(std::floor(room / fit.per_sample_bytes), double(1 << 30))) : 0;
  if (smallest_failed && fit.largest_batch_size >= smallest_failed) {
    fit.largest_batch_size = smallest_failed - 1;
    fit.capped_by_failure = true;
  }
  return fit;
}

namespace {

/// A size like "2.00 GiB" at `pos` (spaces skipped); advances pos past it.
std::optional<int64_t> size_at(std::string_view s, size_t pos) {
  while (pos < s.size() && s[pos] == ' ') ++pos;
  size_t end = pos;
  while (end < s.size() && (std::isdigit((unsigned char)s[end]) || s[end] == '.')) ++end;
  if (end == pos) return std::nullopt;
  const double v = std::strtod(std::string(s.substr(pos, end - pos)).c_str(), nullptr);
  size_t u = end;
  while (u < s.size() && s[u] == ' ') ++u;
  size_t ue = u;
  while (ue < s.size() && std::isalpha((unsigned char)s[ue])) ++ue;
  const std::string_view unit = s.substr(u, ue - u);
  double mult = 0;
  if (unit == "B" || unit == "bytes")
    mult = 1;
  else if (unit == "KiB" || unit == "KB" || unit == "K")
    mult = 1024.0;
  else if (unit == "MiB" || unit == "MB" || unit == "M")
    mult = 1024.0 * 1024;
  else if (unit == "GiB" || unit == "GB" || unit == "G")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "TiB" || unit == "TB" || unit == "T")
    mult = 1024.0 * 1024 * 1024 * 1024;
  if (mult == 0) return std::nullopt;
  return int64_t(v * mult);
}

/// The size right after `key`.
std::optional<int64_t> size_after(std::string_view s, std::string_view key) {
  const size_t at = s.find(key);
  if (at == std::string_view::npos) return std::nullopt;
  return size_at(s, at + key.size());
}

/// The size right before `key` ("6.21 GiB already allocated").
std::optional<int64_t> size_before(std::string_view s, std::string_view key) {
  const size_t at = s.find(key);
  if (at == std::string_view::npos || at == 0) return std::nullopt;
  // Walk back over "<number> <unit> " to the start of the number.
  size_t i = at;
  while (i > 0 && s[i - 1] == ' ') --i;
  while (i > 0 && std::isalpha((unsigned char)s[i - 1])) --i;
  while (i > 0 && s[i - 1] == ' ') --i;
  while (i > 0 && (std::isdigit((unsigned char)s[i - 1]) || s[i - 1] == '.')) --i;
  return size_at(s, i);
}

}  // namespace

CudaOomText parse_cuda_oom(std::string_view m) noexcept {
  CudaOomText t;
  try {
    t.tried_bytes = size_after(m, "Tried to allocate ");
    if (size_t at = m.find("GPU "); at != std::string_view::npos) {
      size_t e = at + 4;
      while (e < m.size() && std::isdigit((unsigned char)m[e])) ++e;
      if (e > at + 4) t.device = std::atoi(std::string(m.substr(at + 4, e - at - 4)).c_str());
    }
    t.total_bytes = size_after(m, "total capacity of ");
    if (!t.total_bytes) t.total_bytes = size_before(m, "total capacity");
    t.free_bytes = size_after(m, "of which ");
    if (!t.free_bytes) t.free_bytes = size_before(m, " free;");
    if (!t.free_bytes) t.free_bytes = size_before(m, " free)");
    t.allocated_bytes = size_before(m, "is allocated by PyTorch");
    if (!t.allocated_bytes) t.allocated_bytes = size_before(m, "already allocated");
    t.reserved_unallocated_bytes = size_before(m, "is reserved by PyTorch but unallocated");
  } catch (...) {  // a std::string allocation that failed: the figures stay unknown
  }
  return t;
}

std::vector<PeakSample> peak_samples(const FailureView& fv, int loader, int device) {
  std::vector<PeakSample> out;
  for (const CudaPeak& p : fv.cuda)
    if ((loader < 0 || p.loader == loader) && p.device == device)
      out.push_back(PeakSample{p.batch_size, p.peak_bytes, p.baseline_bytes, false});
  return out;
}

void add_fit_evidence(report::Finding& f, const std::optional<BatchFit>& fit) {
  if (!fit) return;
  f.add("largest_batch_size_that_fits", double(fit->largest_batch_size));
  f.add("per_sample_bytes", fit->per_sample_bytes);
  f.add("fixed_bytes", fit->fixed_bytes);
  f.add("budget_bytes", double(fit->budget_bytes));
  f.add("batch_sizes_measured", double(fit->batch_sizes));
}

std::string batch_advice(const std::optional<BatchFit>& fit, std::optional<int> current) {
  if (fit && fit->largest_batch_size >= 1) {
    std::string s = "batch_size=" + std::to_string(fit->largest_batch_size) +
                    " is the largest that fits with " + num(kCudaKeepFreeFraction * 100) +
                    "% of the GPU kept free";
    if (current && *current > fit->largest_batch_size) {
      const int steps = (*current + fit->largest_batch_size - 1) / fit->largest_batch_size;
      s += " (with " + std::to_string(steps) +
           " steps of gradient accumulation to keep the "
           "effective batch of " +
           std::to_string(*current) + ")";
    }
    return s;
  }
  if (fit) return "not even batch_size=1 fits beside the fixed " + bytes_text(fit->fixed_bytes);
  return current && *current > 1
             ? "halve the batch (batch_size=" + std::to_string(*current / 2) + ")"
             : "a smaller model or batch";
}

}  // namespace dldoctor::analyze
