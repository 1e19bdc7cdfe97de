// Formatting only: nothing here decides anything.
#include "dldoctor_core/analyze/text.hpp"

#include <string.h>

#include <cmath>
#include <cstdint>
#include <cstdio>

namespace dldoctor::analyze {

std::string num(double v) {
  char buf[32];
  double a = std::fabs(v);
  if (a >= 100 || v == std::floor(v))
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (a >= 10)
    std::snprintf(buf, sizeof buf, "%.1f", v);
  else
    std::snprintf(buf, sizeof buf, "%.2g", v);
  std::string out = buf;
  if (out.size() > 2 && out.compare(out.size() - 2, 2, ".0") == 0) out.resize(out.size() - 2);
  return out;
}

std::string count_of(double n, const std::string& noun) {
  return num(n) + " " + noun + (n == 1 ? "" : "s");
}

std::string bytes_text(double bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = bytes;
  while (u < 4 && (v >= 1024 || v <= -1024)) v /= 1024, ++u;
  char buf[48];
  if (u == 0 || v >= 100 || v <= -100 || v == double(int64_t(v)))
    std::snprintf(buf, sizeof buf, "%.0f %s", v, kUnits[u]);
  else
    std::snprintf(buf, sizeof buf, "%.1f %s", v, kUnits[u]);
  return buf;
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, s >= 10 ? "%.0f s" : "%.1f s", s);
  return buf;
}

std::string signal_name(int signal) {
  // sigabbrev_np is glibc >= 2.32; fall back to the number elsewhere.
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 32))
  if (const char* n = ::sigabbrev_np(signal)) return std::string("SIG") + n;
#endif
  return "signal " + std::to_string(signal);
}

std::string loader_label(int rank, int loader, bool capital) {
  if (rank < 0) return std::string(capital ? "Loader " : "loader ") + std::to_string(loader);
  return std::string(capital ? "Rank " : "rank ") + std::to_string(rank) + " \xc2\xb7 loader " +
         std::to_string(loader);
}

}  // namespace dldoctor::analyze
