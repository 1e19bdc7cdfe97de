#include "dldoctor_core/system/shm.hpp"

#include <sys/statvfs.h>

#include <climits>
#include <cstdlib>

namespace dldoctor::system {

ShmFacts read_shm(const std::string& path, const std::vector<Mount>& mounts) {
  ShmFacts f;
  f.path = path;
  struct statvfs st;
  if (::statvfs(path.c_str(), &st) == 0) {
    f.total_bytes = static_cast<int64_t>(st.f_blocks) * static_cast<int64_t>(st.f_frsize);
    // f_bavail: what an unprivileged worker may allocate, which is what fails with SIGBUS.
    f.free_bytes = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  }
  char resolved[PATH_MAX];
  if (::realpath(path.c_str(), resolved)) {
    if (const Mount* m = find_mount(mounts, resolved)) {
      f.fs_type = m->fs_type;
      f.options = m->super_options;
    }
  }
  return f;
}

}  // namespace dldoctor::system
