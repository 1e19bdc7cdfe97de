// The one error type of the core. Raised at setup (opening a ring, starting a thread);
// hot paths are noexcept and return status instead.
#pragma once

#include <stdexcept>
#include <string>

namespace dldoctor {

/// An error the user can act on; its message is one line that says what and how to fix.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace dldoctor
