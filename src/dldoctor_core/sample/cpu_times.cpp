#include "dldoctor_core/sample/cpu_times.hpp"

#include "dldoctor_core/sample/field.hpp"

namespace dldoctor::sample {

std::optional<CpuTimes> parse_cpu_times(std::string_view text) noexcept {
  auto rest = line_after(text, "cpu ");
  if (!rest) return std::nullopt;
  // user nice system idle iowait irq softirq steal; guest time is already inside user, so the
  // columns after steal are not added again.
  int64_t v[8] = {};
  int n = 0;
  for (; n < 8; ++n) {
    auto x = take_int(*rest);
    if (!x) break;
    v[n] = *x;
  }
  if (n < 4) return std::nullopt;
  const int64_t idle = v[3] + v[4];
  const int64_t busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  return CpuTimes{busy, busy + idle, v[7]};
}

std::optional<int64_t> parse_fork_count(std::string_view text) noexcept {
  return int_after(text, "processes ");
}

}  // namespace dldoctor::sample
