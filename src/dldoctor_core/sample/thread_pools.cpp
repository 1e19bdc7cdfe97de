// Pool libraries from maps, pool sizes from environ. The names are matched on the file name
// of each mapping: vendored copies (numpy's libscipy_openblas64_, opencv-python's bundled
// libs) keep the library's name in theirs.
#include "dldoctor_core/sample/thread_pools.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>

namespace dldoctor::sample {
namespace {

struct Family {
  const char* prefix;  // of the mapped file's name
  const char* name;
};

// Most specific first: "libiomp5" before "libomp", "libopenblas" wherever it sits in a
// vendored name.
constexpr Family kFamilies[] = {
    {"libgomp", "OpenMP (libgomp)"},
    {"libiomp", "OpenMP (Intel libiomp5)"},
    {"libomp", "OpenMP (LLVM libomp)"},
    {"libmkl", "MKL"},
    {"libopenblas", "OpenBLAS"},
    {"libscipy_openblas", "OpenBLAS"},
    {"libopencv", "OpenCV"},
    {"cv2.", "OpenCV"},
    {"libtbb", "TBB"},
    {"libblis", "BLIS"},
};

std::string_view file_name(std::string_view path) {
  const size_t slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string read_text(const std::string& path, size_t max_bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return {};
  std::string s;
  s.resize(max_bytes);
  f.read(s.data(), std::streamsize(max_bytes));
  s.resize(size_t(f.gcount()));
  return s;
}

}  // namespace

const std::vector<std::string>& pool_env_names() {
  static const std::vector<std::string> names = {
      "OMP_NUM_THREADS",      "MKL_NUM_THREADS",        "OPENBLAS_NUM_THREADS",
      "GOTO_NUM_THREADS",     "BLIS_NUM_THREADS",       "NUMEXPR_NUM_THREADS",
      "OPENCV_FOR_THREADS_NUM", "OMP_WAIT_POLICY",      "GOMP_SPINCOUNT",
      "KMP_BLOCKTIME",        "OMP_DYNAMIC",
  };
  return names;
}

std::vector<std::string> parse_pool_libraries(std::string_view maps) {
  std::vector<std::string> out;
  size_t pos = 0;
  while (pos < maps.size()) {
    size_t end = maps.find('\n', pos);
    if (end == std::string_view::npos) end = maps.size();
    std::string_view line = maps.substr(pos, end - pos);
    pos = end + 1;
    // "addr perms offset dev inode   /path": the path starts at the first '/'.
    const size_t slash = line.find('/');
    if (slash == std::string_view::npos) continue;
    const std::string_view name = file_name(line.substr(slash));
    for (const Family& f : kFamilies) {
      const std::string_view prefix(f.prefix);
      const bool match = prefix == "cv2." ? name.substr(0, prefix.size()) == prefix
                                          : name.find(prefix) != std::string_view::npos;
      if (!match) continue;
      if (std::find(out.begin(), out.end(), f.name) == out.end()) out.emplace_back(f.name);
      break;
    }
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> parse_pool_env(std::string_view environ) {
  std::vector<std::pair<std::string, std::string>> found;
  size_t pos = 0;
  while (pos < environ.size()) {
    size_t end = environ.find('\0', pos);
    if (end == std::string_view::npos) end = environ.size();
    const std::string_view entry = environ.substr(pos, end - pos);
    pos = end + 1;
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) continue;
    const std::string_view key = entry.substr(0, eq);
    for (const std::string& name : pool_env_names())
      if (key == name) found.emplace_back(name, std::string(entry.substr(eq + 1, 64)));
  }
  // The documented order, whatever the environment's.
  const auto& names = pool_env_names();
  std::stable_sort(found.begin(), found.end(), [&](const auto& a, const auto& b) {
    return std::find(names.begin(), names.end(), a.first) <
           std::find(names.begin(), names.end(), b.first);
  });
  return found;
}

ThreadPools read_thread_pools(int pid) {
  ThreadPools p;
  const std::string dir = "/proc/" + std::to_string(pid) + "/";
  // A torch process's maps is ~200 KB; more than 4 MiB is not a DataLoader worker's.
  const std::string maps = read_text(dir + "maps", size_t(4) << 20);
  if (!maps.empty()) {
    p.maps_read = true;
    p.libraries = parse_pool_libraries(maps);
  }
  std::ifstream probe(dir + "environ", std::ios::binary);
  if (probe) {
    const std::string env((std::istreambuf_iterator<char>(probe)), std::istreambuf_iterator<char>());
    p.environ_read = true;
    p.env = parse_pool_env(env);
  }
  return p;
}

}  // namespace dldoctor::sample
