// The thread pools a process can run: which pool libraries are mapped into it
// (/proc/<pid>/maps) and the environment variables that size them (/proc/<pid>/environ).
// Read once per worker whose threads compete, not per pass: the maps file of a process that
// imported torch is a few hundred lines (~50 KiB, ~0.4 ms with environ).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dldoctor::sample {

/// What sizes a process's thread pools.
struct ThreadPools {
  /// Pool libraries mapped, by family, e.g. "OpenMP (libgomp)", "OpenBLAS", "MKL",
  /// "OpenCV", "TBB"; each once, in the order first mapped.
  std::vector<std::string> libraries;
  /// The pool-sizing variables set in its environment at exec (name, value), e.g.
  /// {"OMP_NUM_THREADS", "8"}. A variable changed later with os.environ is not seen.
  std::vector<std::pair<std::string, std::string>> env;
  bool maps_read = false;     ///< false: maps could not be read (gone, no permission)
  bool environ_read = false;  ///< false: environ could not be read
};

/// The environment variables that size thread pools, in the order reports list them.
const std::vector<std::string>& pool_env_names();

/// Pool library families named in the text of a maps file.
std::vector<std::string> parse_pool_libraries(std::string_view maps);
/// The pool-sizing variables of a NUL-separated environ block.
std::vector<std::pair<std::string, std::string>> parse_pool_env(std::string_view environ);

/// Reads both for `pid`; fields stay empty (and *_read false) for what cannot be read.
ThreadPools read_thread_pools(int pid);

}  // namespace dldoctor::sample
