#include "dldoctor_core/system/limits.hpp"

#include <dirent.h>

#include "dldoctor_core/system/file.hpp"

namespace dldoctor::system {

std::optional<int64_t> rlimit_value(rlim_t value) noexcept {
  if (value == RLIM_INFINITY) return std::nullopt;
  return static_cast<int64_t>(value);
}

std::optional<int64_t> count_open_fds(const std::string& proc_root) {
  DIR* dir = ::opendir(join_path(proc_root, "self/fd").c_str());
  if (!dir) return std::nullopt;
  int64_t n = 0;
  while (struct dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') ++n;
  }
  ::closedir(dir);
  return n > 0 ? n - 1 : 0;  // the directory stream itself holds one
}

LimitFacts read_limits(const std::string& proc_root) {
  LimitFacts f;
  struct rlimit r;
  if (::getrlimit(RLIMIT_NOFILE, &r) == 0) {
    f.nofile_soft = rlimit_value(r.rlim_cur);
    f.nofile_hard = rlimit_value(r.rlim_max);
  }
  if (::getrlimit(RLIMIT_MEMLOCK, &r) == 0) {
    f.memlock_soft = rlimit_value(r.rlim_cur);
    f.memlock_hard = rlimit_value(r.rlim_max);
  }
  f.open_fds = count_open_fds(proc_root);
  return f;
}

}  // namespace dldoctor::system
