// What the kernel says about a possibly stuck process: its scheduler state, the kernel
// function it sleeps in, the syscall it is blocked in, and its CPU time. Read straight from
// /proc on the watchdog's own thread, so it works while the watched Python is stuck.
// A field that cannot be read stays unknown ("" / std::nullopt), never 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dldoctor::watchdog {

/// One thread of a process, from /proc/<pid>/task/<tid>.
struct ThreadProbe {
  int tid = 0;
  std::string name;     ///< comm ("" unknown)
  std::string state;    ///< "R", "S", "D", "Z", "T" ..., "" unknown
  std::string wchan;    ///< kernel wait function, "" unknown or not sleeping
  std::string syscall;  ///< see ProcessProbe::syscall
};

/// One process, from /proc/<pid>.
struct ProcessProbe {
  int pid = 0;
  bool gone = false;     ///< no /proc/<pid>: exited and reaped (state is then "gone")
  std::string state;     ///< "R", "S", "D", "Z", "T", "t", "I", "X", "gone", "" unknown
  std::string comm;      ///< the command name in /proc/<pid>/stat
  std::string wchan;     ///< kernel wait function of the main thread ("" unknown / running)
  /// Syscall the main thread is blocked in: a name ("futex"), "syscall_<n>" when unnamed,
  /// "running" (on a CPU), "none" (blocked outside a syscall, e.g. a page fault), "" unknown
  /// (/proc/<pid>/syscall needs ptrace rights).
  std::string syscall;
  std::optional<int64_t> syscall_nr;     ///< the raw number when blocked in a syscall
  std::vector<uint64_t> syscall_args;    ///< its six arguments, when known
  std::optional<int64_t> cpu_ns;         ///< utime + stime of all threads (10 ms ticks)
  std::optional<int> num_threads;
  std::optional<int> exit_code;          ///< a zombie's exit status (exited normally)
  std::optional<int> exit_signal;        ///< a zombie's killing signal
  std::optional<uint64_t> caught_signals;  ///< SigCgt of /proc/<pid>/status: handled signals
  std::optional<uint64_t> main_blocked_signals;  ///< SigBlk there: the main thread's mask
  std::vector<ThreadProbe> threads;      ///< per thread, when asked for
};

/// Reads /proc/<pid>; `with_threads` adds /proc/<pid>/task/*. Never throws.
ProcessProbe probe_process(int pid, bool with_threads = true) noexcept;

/// Only the state letter of /proc/<pid>/stat: "gone" when the pid does not exist, "" when
/// unreadable. Cheap enough to poll while waiting for a stack.
std::string process_state(int pid) noexcept;

/// CPU time of a process (utime + stime of all its threads), or nullopt when unreadable.
std::optional<int64_t> process_cpu_ns(int pid) noexcept;

/// The path behind descriptor `fd` of `pid` (readlink of /proc/<pid>/fd/<fd>), "" unknown.
std::string fd_target(int pid, int fd);

/// What a kernel wait function says about where a D-state process waits ("NFS server",
/// "block device" ...), or "" when the name tells nothing.
std::string describe_wchan(std::string_view wchan);

/// Parses /proc/<pid>/stat text into `out` (state, comm, cpu, threads, zombie exit status).
/// Returns false for text that is not a stat line. Exposed for tests.
bool parse_proc_stat(std::string_view text, ProcessProbe& out) noexcept;

/// Parses /proc/<pid>/syscall text into `out` (syscall, syscall_nr, syscall_args). Exposed
/// for tests.
void parse_proc_syscall(std::string_view text, ProcessProbe& out);

}  // namespace dldoctor::watchdog
