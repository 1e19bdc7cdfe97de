#include "dldoctor_core/watchdog/hang.hpp"

#include <string.h>

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

std::string describe(const ProcessCapture& p) {
  std::string pid = "(pid " + std::to_string(p.pid) + ")";
  if (p.worker < 0) return "the main process " + pid;
  return "worker " + std::to_string(p.worker) + " of loader " + std::to_string(p.loader) + " " +
         pid;
}

std::string signal_name(int signal) {
  // sigabbrev_np is glibc >= 2.32; fall back to the number elsewhere.
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  if (const char* n = ::sigabbrev_np(signal)) return std::string("SIG") + n;
#endif
  return "signal " + std::to_string(signal);
}

}  // namespace dldoctor::watchdog
