// /proc/<pid>/wchan: the kernel function a sleeping process waits in (futex_wait_queue,
// pipe_read, io_schedule ...). The kernel writes "0" for a running process or when it hides
// the symbol.
#pragma once

#include <string>
#include <string_view>

namespace dldoctor::sample {

/// The symbol name, or "" for "0", empty or unreadable text.
std::string parse_wchan(std::string_view text);

}  // namespace dldoctor::sample
