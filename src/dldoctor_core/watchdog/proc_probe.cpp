// Every read is open/read/close: the probe runs a handful of times per stall, so keeping
// descriptors open (as the sampler does) would buy nothing here.
#include "dldoctor_core/watchdog/proc_probe.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>

#include "dldoctor_core/watchdog/syscall_name.hpp"

namespace dldoctor::watchdog {
namespace {

/// The whole of a small /proc file, or nullopt.
std::optional<std::string> read_file(const std::string& path) noexcept {
  try {
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    std::string out;
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(fd, buf, sizeof buf);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        ::close(fd);
        return std::nullopt;
      }
      if (n == 0) break;
      out.append(buf, size_t(n));
    }
    ::close(fd);
    return out;
  } catch (...) {
    return std::nullopt;
  }
}

std::string_view trim(std::string_view s) {
  auto blank = [](char c) { return c == '\n' || c == ' ' || c == '\t' || c == '\0'; };
  while (!s.empty() && blank(s.back())) s.remove_suffix(1);
  while (!s.empty() && blank(s.front())) s.remove_prefix(1);
  return s;
}

/// /proc/<pid>/wchan: "0" (or empty) means running or hidden by kptr_restrict.
std::string parse_wchan_text(std::string_view text) {
  text = trim(text);
  if (text.empty() || text == "0") return "";
  return std::string(text);
}

template <typename T>
bool to_int(std::string_view s, T& out, int base = 10) {
  if (base == 16 && s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) {
    s.remove_prefix(2);
  }
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc() && p == s.data() + s.size();
}

std::vector<std::string_view> split_ws(std::string_view s) {
  std::vector<std::string_view> out;
  size_t i = 0;
  while (i < s.size()) {
    while (i < s.size() && (s[i] == ' ' || s[i] == '\n')) ++i;
    size_t j = i;
    while (j < s.size() && s[j] != ' ' && s[j] != '\n') ++j;
    if (j > i) out.push_back(s.substr(i, j - i));
    i = j;
  }
  return out;
}

void probe_threads(int pid, ProcessProbe& out) {
  std::string dir = "/proc/" + std::to_string(pid) + "/task";
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return;
  while (dirent* e = ::readdir(d)) {
    int tid = 0;
    if (!to_int(std::string_view(e->d_name), tid)) continue;
    std::string base = dir + "/" + e->d_name;
    ThreadProbe t;
    t.tid = tid;
    ProcessProbe scratch;
    if (auto stat = read_file(base + "/stat"); stat && parse_proc_stat(*stat, scratch)) {
      t.state = scratch.state;
      t.name = scratch.comm;
    }
    if (auto w = read_file(base + "/wchan")) t.wchan = parse_wchan_text(*w);
    if (auto s = read_file(base + "/syscall")) {
      parse_proc_syscall(*s, scratch);
      t.syscall = scratch.syscall;
    }
    out.threads.push_back(std::move(t));
  }
  ::closedir(d);
}

}  // namespace

bool parse_proc_stat(std::string_view text, ProcessProbe& out) noexcept {
  // comm is in parentheses and may itself hold spaces and ')': the last ')' ends it.
  size_t open = text.find('(');
  size_t close = text.rfind(')');
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return false;
  }
  try {
    out.comm = std::string(text.substr(open + 1, close - open - 1));
    auto fields = split_ws(text.substr(close + 1));
    // fields[0] is field 3 of proc(5) (state); field k is fields[k - 3].
    if (fields.empty()) return false;
    out.state = std::string(fields[0]);
    auto field = [&](int k) -> std::optional<std::string_view> {
      size_t i = size_t(k - 3);
      if (i < fields.size()) return fields[i];
      return std::nullopt;
    };
    int64_t utime = 0, stime = 0;
    auto u = field(14), s = field(15);
    if (u && s && to_int(*u, utime) && to_int(*s, stime)) {
      static const long kTicks = ::sysconf(_SC_CLK_TCK);
      if (kTicks > 0) out.cpu_ns = (utime + stime) * (1'000'000'000 / kTicks);
    }
    int threads = 0;
    if (auto t = field(20); t && to_int(*t, threads)) out.num_threads = threads;
    // Field 52 (Linux >= 3.5) is the waitpid() status, meaningful once the process is a zombie.
    int status = 0;
    if (auto x = field(52); x && out.state == "Z" && to_int(*x, status)) {
      if ((status & 0x7f) != 0) {
        out.exit_signal = status & 0x7f;
      } else {
        out.exit_code = (status >> 8) & 0xff;
      }
    }
    return true;
  } catch (...) {
    return false;
  }
}

void parse_proc_syscall(std::string_view text, ProcessProbe& out) {
  auto f = split_ws(trim(text));
  if (f.empty()) return;
  if (f[0] == "running") {
    out.syscall = "running";
    return;
  }
  int64_t nr = 0;
  if (!to_int(f[0], nr)) return;
  if (nr < 0) {
    out.syscall = "none";
    return;
  }
  out.syscall_nr = nr;
  out.syscall = syscall_name(nr);
  out.syscall_args.clear();
  for (size_t i = 1; i < f.size() && i <= 6; ++i) {
    uint64_t v = 0;
    if (!to_int(f[i], v, 16)) break;
    out.syscall_args.push_back(v);
  }
}

ProcessProbe probe_process(int pid, bool with_threads) noexcept {
  ProcessProbe out;
  out.pid = pid;
  try {
    std::string base = "/proc/" + std::to_string(pid);
    auto stat = read_file(base + "/stat");
    if (!stat) {
      // Tell "exited" from "not allowed to look": only a missing directory means gone.
      if (::access(base.c_str(), F_OK) != 0 && errno == ENOENT) {
        out.gone = true;
        out.state = "gone";
      }
      return out;
    }
    if (!parse_proc_stat(*stat, out)) return out;
    if (auto w = read_file(base + "/wchan")) out.wchan = parse_wchan_text(*w);
    if (auto s = read_file(base + "/syscall")) parse_proc_syscall(*s, out);
    if (auto status = read_file(base + "/status")) {
      auto mask_of = [&](std::string_view key) -> std::optional<uint64_t> {
        size_t at = status->find(key);
        if (at == std::string::npos) return std::nullopt;
        std::string_view rest = std::string_view(*status).substr(at + key.size());
        rest = rest.substr(0, rest.find('\n'));
        uint64_t mask = 0;
        if (!to_int(trim(rest), mask, 16)) return std::nullopt;
        return mask;
      };
      out.caught_signals = mask_of("\nSigCgt:");
      out.main_blocked_signals = mask_of("\nSigBlk:");
    }
    if (with_threads) probe_threads(pid, out);
  } catch (...) {
    // Out of memory mid-probe: what was read stays, the rest stays unknown.
  }
  return out;
}

std::string process_state(int pid) noexcept {
  std::string base = "/proc/" + std::to_string(pid);
  auto stat = read_file(base + "/stat");
  if (!stat) return ::access(base.c_str(), F_OK) != 0 && errno == ENOENT ? "gone" : "";
  size_t close = stat->rfind(')');
  if (close == std::string::npos || close + 2 >= stat->size()) return "";
  return std::string(1, (*stat)[close + 2]);
}

std::optional<int64_t> process_cpu_ns(int pid) noexcept {
  auto stat = read_file("/proc/" + std::to_string(pid) + "/stat");
  if (!stat) return std::nullopt;
  ProcessProbe p;
  if (!parse_proc_stat(*stat, p)) return std::nullopt;
  return p.cpu_ns;
}

std::string fd_target(int pid, int fd) {
  std::string link = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  char buf[4096];
  ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return "";
  return std::string(buf, size_t(n));
}

std::string describe_wchan(std::string_view w) {
  auto has = [&](std::string_view s) { return w.find(s) != std::string_view::npos; };
  auto starts = [&](std::string_view s) { return w.substr(0, s.size()) == s; };
  if (w.empty()) return "";
  if (has("nfs") || starts("rpc_") || starts("__rpc")) return "an NFS server (network file system)";
  if (has("fuse")) return "a FUSE filesystem (s3fs, gcsfuse, sshfs ...)";
  if (has("cifs") || has("smb")) return "an SMB/CIFS network share";
  if (has("ceph")) return "a Ceph filesystem";
  if (has("lustre") || starts("ll_") || has("ptlrpc")) return "a Lustre filesystem";
  if (starts("p9_") || has("v9fs")) return "a 9p shared folder (VM or container host)";
  if (has("io_schedule") || has("folio_wait") || has("wait_on_page") || has("lock_page") ||
      has("bit_wait_io") || starts("blk_") || has("jbd2") || starts("ext4") || starts("xfs") ||
      has("bread")) {
    return "block storage (a disk read or write that has not completed)";
  }
  return "";
}

}  // namespace dldoctor::watchdog
