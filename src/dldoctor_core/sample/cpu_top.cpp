#include "dldoctor_core/sample/cpu_top.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "dldoctor_core/sample/proc_file.hpp"
#include "dldoctor_core/sample/stat.hpp"

namespace dldoctor::sample {

namespace {

// A command line is shown on one line of the check's table: longer ones are cut.
constexpr size_t kCmdlineMaxChars = 80;

std::string read_cmdline(const std::string& proc_root, int pid, ReadBuffer& buf) {
  const std::string path = proc_root + "/" + std::to_string(pid) + "/cmdline";
  auto text = read_whole(path.c_str(), buf);
  if (!text) return {};
  std::string s(*text);
  while (!s.empty() && s.back() == '\0') s.pop_back();
  for (char& c : s) {
    if (c == '\0' || c == '\n' || c == '\t') c = ' ';
  }
  if (s.size() > kCmdlineMaxChars) s = s.substr(0, kCmdlineMaxChars - 3) + "...";
  return s;
}

}  // namespace

std::unordered_map<int, CpuReading> read_cpu_readings(const std::string& proc_root) {
  std::unordered_map<int, CpuReading> out;
  ReadBuffer buf;
  ProcDir dir(proc_root, nullptr);
  std::vector<int> pids;
  if (!dir.numbers(buf, pids)) return out;
  out.reserve(pids.size());
  for (int pid : pids) {
    const std::string path = proc_root + "/" + std::to_string(pid) + "/stat";
    auto text = read_whole(path.c_str(), buf);
    if (!text) continue;  // exited between the listing and the read
    auto st = parse_stat(*text);
    if (!st || !st->utime_ticks || !st->stime_ticks) continue;
    out[pid] = CpuReading{st->comm, st->start_ticks.value_or(0),
                          *st->utime_ticks + *st->stime_ticks};
  }
  return out;
}

std::vector<CpuUser> rank_cpu_users(const std::unordered_map<int, CpuReading>& before,
                                    const std::unordered_map<int, CpuReading>& after,
                                    double seconds, double ticks_per_s, size_t count,
                                    double min_pct) {
  std::vector<CpuUser> out;
  if (seconds <= 0 || ticks_per_s <= 0) return out;
  for (const auto& [pid, now] : after) {
    auto it = before.find(pid);
    if (it == before.end() || it->second.start_ticks != now.start_ticks) continue;
    const int64_t used = now.cpu_ticks - it->second.cpu_ticks;
    if (used <= 0) continue;
    const double pct = 100.0 * static_cast<double>(used) / ticks_per_s / seconds;
    if (pct < min_pct) continue;
    out.push_back(CpuUser{pid, now.comm, {}, pct});
  }
  std::sort(out.begin(), out.end(), [](const CpuUser& a, const CpuUser& b) {
    return a.cpu_pct != b.cpu_pct ? a.cpu_pct > b.cpu_pct : a.pid < b.pid;
  });
  if (out.size() > count) out.resize(count);
  return out;
}

std::vector<CpuUser> top_cpu_users(const std::string& proc_root, double window_s, size_t count,
                                   double min_pct) {
  const auto t0 = std::chrono::steady_clock::now();
  auto before = read_cpu_readings(proc_root);
  if (before.empty()) return {};
  std::this_thread::sleep_for(std::chrono::duration<double>(window_s));
  const auto t1 = std::chrono::steady_clock::now();
  auto after = read_cpu_readings(proc_root);
  // The window is measured, not assumed: the sleep may run long on a loaded machine.
  const double seconds = std::chrono::duration<double>(t1 - t0).count();
  const long hz = ::sysconf(_SC_CLK_TCK);
  auto out = rank_cpu_users(before, after, seconds, hz > 0 ? static_cast<double>(hz) : 100.0,
                            count, min_pct);
  ReadBuffer buf;
  for (auto& u : out) u.cmdline = read_cmdline(proc_root, u.pid, buf);
  return out;
}

}  // namespace dldoctor::sample
