#include "dldoctor_core/sample/machine_reader.hpp"

#include <sys/statvfs.h>

#include <algorithm>

#include "dldoctor_core/sample/meminfo.hpp"
#include "dldoctor_core/sample/pressure.hpp"

namespace dldoctor::sample {
namespace {
std::optional<double> per_second(std::optional<int64_t> now, std::optional<int64_t> before,
                                 int64_t dt_ns) {
  if (!now || !before || dt_ns <= 0 || *now < *before) return std::nullopt;
  return double(*now - *before) * 1e9 / double(dt_ns);
}
}  // namespace

MachineReader::MachineReader(std::string shm_path)
    : stat_("/proc/stat", &budget_),
      meminfo_("/proc/meminfo", &budget_),
      vmstat_("/proc/vmstat", &budget_, Records::many),
      cpu_pressure_("/proc/pressure/cpu", &budget_),
      io_pressure_("/proc/pressure/io", &budget_),
      mem_pressure_("/proc/pressure/memory", &budget_),
      shm_path_(std::move(shm_path)) {}

MachineSample MachineReader::read(int64_t t_ns, ReadBuffer& buf, bool slow) noexcept {
  if (!slow && last_t_ns_ > 0) return last_;
  MachineSample m;
  const int64_t dt = last_t_ns_ > 0 ? t_ns - last_t_ns_ : 0;

  std::optional<CpuTimes> cpu;
  forks_.reset();
  if (auto text = stat_.read(buf)) {
    cpu = parse_cpu_times(*text);
    forks_ = parse_fork_count(*text);
  }
  if (cpu && last_cpu_ && cpu->total > last_cpu_->total) {
    const double total = double(cpu->total - last_cpu_->total);
    m.cpu_busy_pct = 100.0 * double(cpu->busy - last_cpu_->busy) / total;
    m.cpu_steal_pct = 100.0 * double(std::max<int64_t>(0, cpu->steal - last_cpu_->steal)) / total;
  }
  last_cpu_ = cpu;

  if (auto text = meminfo_.read(buf)) m.mem_available_bytes = parse_mem_available(*text);

  struct statvfs vfs;
  if (statvfs(shm_path_.c_str(), &vfs) == 0 && vfs.f_blocks > 0) {
    m.shm_total_bytes = int64_t(vfs.f_blocks) * int64_t(vfs.f_frsize);
    m.shm_used_bytes = int64_t(vfs.f_blocks - vfs.f_bfree) * int64_t(vfs.f_frsize);
  }

  SwapCounts swap;
  if (auto text = vmstat_.read(buf)) swap = parse_vmstat(*text);
  m.swap_in_per_s = per_second(swap.pswpin, last_swap_.pswpin, dt);
  m.swap_out_per_s = per_second(swap.pswpout, last_swap_.pswpout, dt);
  last_swap_ = swap;

  auto pressure = [&](ProcFile& file) {
    auto text = file.read(buf);
    return text ? parse_pressure_some_avg10(*text) : std::nullopt;
  };
  m.cpu_pressure_some = pressure(cpu_pressure_);
  m.io_pressure_some = pressure(io_pressure_);
  m.mem_pressure_some = pressure(mem_pressure_);

  last_t_ns_ = t_ns;
  last_ = m;
  return m;
}

}  // namespace dldoctor::sample
