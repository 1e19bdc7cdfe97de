#include "dldoctor_core/watchdog/hang.hpp"

namespace dldoctor::watchdog {

const LoaderContext* HangContext::find(int loader) const noexcept {
  for (const LoaderContext& l : loaders) {
    if (l.loader == loader) return &l;
  }
  return nullptr;
}

std::optional<double> cpu_share(const ProcessCapture& p) noexcept {
  if (!p.cpu_ns_since_stall || p.cpu_window_s <= 0) return std::nullopt;
  return double(*p.cpu_ns_since_stall) / 1e9 / p.cpu_window_s;
}

}  // namespace dldoctor::watchdog
