// Whose code a Python source path is: the job's own, an installed package or the standard
// library, torch's DataLoader machinery, or dldoctor's hooks. Read by the rules that quote a
// frame to the user (a traceback's, a profile's hot step): the user's own frame is the one
// to name when there is one.
#pragma once

#include <string_view>

namespace dldoctor::analyze {

/// Whose code a frame is.
enum class Owner {
  kUser,      ///< the job's own code
  kLibrary,   ///< an installed package (site-/dist-packages) or the standard library
  kTorch,     ///< torch itself (the DataLoader's machinery)
  kDldoctor,  ///< dldoctor's hooks
};

/// The owner of the source file `file` ("path.py", or "path.py:123").
Owner owner_of(std::string_view file) noexcept;

/// Whether `needle` occurs in `hay` (a path, a line of code, a message).
inline bool contains(std::string_view hay, std::string_view needle) noexcept {
  return hay.find(needle) != std::string_view::npos;
}

}  // namespace dldoctor::analyze
