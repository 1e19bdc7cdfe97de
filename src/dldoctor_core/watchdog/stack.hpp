// Python stacks of a stuck process, without attaching to it: every process of a watched job
// has two stack-dump handlers writing to <run_dir>/stack-<pid>.txt (dldoctor/job/stackdump.py).
// `signal` asks for all threads at the next safe point (a Python handler the main thread runs
// with the GIL, so no frame changes under it); `native_stack_signal(signal)` asks for the main
// thread's stack from the C handler (faulthandler), which works while that thread is stuck in
// C code and never reaches a safe point. This file sends the first, the second when the first
// brings nothing for a moment, waits, reads back and parses that text.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dldoctor::watchdog {

/// One Python frame as faulthandler prints it.
struct PyFrame {
  std::string file;         ///< "" when faulthandler printed ???
  std::optional<int> line;  ///< nullopt when printed as ???
  std::string function;     ///< "" when printed as ???
  std::string code;         ///< the source line, trimmed, when the file could be read ("" unknown)
};

/// One thread's stack, most recent call first.
struct PyThreadStack {
  std::string thread_id;        ///< as printed, e.g. "0x00007f80826e76c0" ("" for "Stack")
  bool current = false;         ///< the thread that ran the signal handler
  bool no_python_frame = false; ///< "<no Python frame>": a thread outside Python code
  bool elided = false;          ///< faulthandler stopped at its depth limit ("  ...")
  bool truncated = false;       ///< the text ended before this stack did
  std::vector<PyFrame> frames;  ///< most recent call first
};

/// Parses faulthandler's all-threads output ("Thread 0x... (most recent call first):",
/// "Current thread 0x...", "Stack (most recent call first):", then
/// `  File "path", line N in func` lines). Lenient: unknown lines end the current thread
/// (newer Pythons append C stacks), a partial last line marks the thread truncated.
std::vector<PyThreadStack> parse_faulthandler(std::string_view text);

/// "file:line in function", the way findings quote a frame.
std::string format_frame(const PyFrame& frame);

/// Fills PyFrame::code from the source files (read on this machine; files that cannot be
/// read leave it empty). Lets rules see `lock.acquire()` or `self.collate_fn(data)` on the
/// line a frame stopped at, which a name alone does not show.
void annotate_source(std::vector<PyThreadStack>& stacks);

/// `<run_dir>/stack-<pid>.txt`, the file the hooks register faulthandler with.
std::string stack_file(const std::string& run_dir, int pid);

/// What came back from one process.
struct StackCapture {
  int pid = 0;
  std::string text;  ///< what the process appended to its stack file ("" none)
  std::string note;  ///< why there is no (complete) text: "gone", "no handler" ...; "" when fine
  bool gone = false; ///< the process no longer exists
  bool native = false; ///< the native signal was sent: the text may be the main thread's only
};

/// The signal the hooks register faulthandler's one-thread dump on, beside `signal`.
inline int native_stack_signal(int signal) noexcept { return signal - 1; }

/// How long a process has to start its safe-point dump before the native one is asked for.
/// A main thread running Python or blocked in a lock, queue or sleep starts within a few
/// milliseconds (the signal goes to that thread and interrupts the wait).
inline constexpr int kSafePointWaitMs = 150;

/// Sends `signal` to the main thread of each pid that has a handler for it (to the process
/// when its main thread blocks it; a pid without a handler is skipped: the default action
/// would end it); if a stack file has not grown after
/// kSafePointWaitMs, or the pid catches only the native signal, sends native_stack_signal(signal)
/// (not to a thread in uninterruptible sleep: it takes neither until it wakes). Waits up to
/// `wait_ms` in total for each stack file to grow and go quiet, and returns what each
/// appended. Bounded; never throws for a process that vanishes or cannot be read.
std::vector<StackCapture> capture_stacks(const std::vector<int>& pids, const std::string& run_dir,
                                         int signal, int wait_ms = 500);

}  // namespace dldoctor::watchdog
