// Names for the syscall numbers /proc/<pid>/syscall shows. Only the calls a stuck loader is
// found in (waits, reads, sleeps, process waits) are named: the point is to say "futex" or
// "read", not to be a full table. Numbers differ per architecture, so both tables are kept.
#pragma once

#include <cstdint>
#include <string>

namespace dldoctor::watchdog {

/// The instruction sets whose syscall numbers are known.
enum class Arch { kX86_64, kAarch64 };

/// The architecture this binary runs on (syscall numbers of the watched processes match it).
Arch native_arch() noexcept;

/// The name of syscall `nr` on `arch` ("futex", "read" ...), or "syscall_<nr>" when unnamed.
std::string syscall_name(int64_t nr, Arch arch = native_arch());

/// True for calls whose first argument is a file descriptor (read, recvfrom, fsync ...),
/// so the file a process waits on can be named from /proc/<pid>/fd.
bool syscall_takes_fd(const std::string& name) noexcept;

}  // namespace dldoctor::watchdog
