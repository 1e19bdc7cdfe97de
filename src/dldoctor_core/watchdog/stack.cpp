// The safe-point handler writes a dump in one write(); faulthandler's native one with many
// small ones from the signal handler. Either is complete within a millisecond unless the
// process is descheduled, so "grew, then quiet for kQuietMs" is the end of a dump.
#include "dldoctor_core/watchdog/stack.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <map>
#include <unordered_map>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/watchdog/proc_probe.hpp"

namespace dldoctor::watchdog {
namespace {

/// A dump that has not grown for this long is complete: the handler writes a whole dump in
/// well under a millisecond of CPU, so 20 ms of quiet leaves room for one scheduler slice.
constexpr int kQuietMs = 20;
/// How often the stack files are checked while waiting.
constexpr int kPollMs = 5;
/// Source files larger than this are not read for annotation (generated code, data).
constexpr std::streamoff kMaxSourceBytes = 8 << 20;

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

/// `  File "path", line N in func` (also `File ???`, `line ???`, `in ???`).
std::optional<PyFrame> parse_frame(std::string_view line) {
  constexpr std::string_view kFile = "  File ";
  if (!starts_with(line, kFile)) return std::nullopt;
  std::string_view rest = line.substr(kFile.size());
  PyFrame f;
  // The path is not escaped and may contain '"' or ", line ": the last ", line " splits it.
  size_t at = rest.rfind(", line ");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view path = rest.substr(0, at);
  if (path.size() >= 2 && path.front() == '"' && path.back() == '"') {
    f.file = std::string(path.substr(1, path.size() - 2));
  } else if (path != "???") {
    return std::nullopt;
  }
  rest = rest.substr(at + 7);
  size_t in = rest.find(" in ");
  if (in == std::string_view::npos) return std::nullopt;
  std::string_view num = rest.substr(0, in);
  int n = 0;
  auto [p, ec] = std::from_chars(num.data(), num.data() + num.size(), n);
  if (ec == std::errc() && p == num.data() + num.size()) {
    f.line = n;
  } else if (num != "???") {
    return std::nullopt;
  }
  std::string_view fn = rest.substr(in + 4);
  if (fn != "???") f.function = std::string(fn);
  return f;
}

/// "Thread 0x..." / "Current thread 0x..." / "Stack": a new thread, with its id.
std::optional<PyThreadStack> parse_header(std::string_view line) {
  PyThreadStack t;
  std::string_view rest;
  if (starts_with(line, "Current thread 0x")) {
    t.current = true;
    rest = line.substr(15);
  } else if (starts_with(line, "Thread 0x")) {
    rest = line.substr(7);
  } else if (starts_with(line, "Stack (most recent call first)")) {
    return t;
  } else {
    return std::nullopt;
  }
  size_t end = rest.find_first_of(" :");
  t.thread_id = std::string(rest.substr(0, end));
  return t;
}

int64_t file_size(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return -1;
  return int64_t(st.st_size);
}

std::string read_range(const std::string& path, int64_t from, int64_t to) {
  std::ifstream in(path, std::ios::binary);
  if (!in || to <= from) return "";
  in.seekg(from);
  std::string out(size_t(to - from), '\0');
  in.read(out.data(), std::streamsize(out.size()));
  out.resize(size_t(in.gcount()));
  return out;
}

void sleep_ms(int ms) {
  timespec ts{0, long(ms) * 1'000'000};
  while (::nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/// Exists and is not a zombie: a zombie runs no handler and never writes a stack.
bool alive(int pid) {
  std::string state = process_state(pid);
  if (state == "gone") return false;
  if (state.empty()) return ::kill(pid, 0) == 0 || errno == EPERM;
  return state != "Z" && state != "X" && state != "x";
}

/// Sends `signal` to the process's main thread: a Python handler runs there, and a thread
/// blocked in a wait is interrupted only by a signal sent to it. A main thread that blocks
/// the signal would keep it pending for good: then to the process, for another thread.
bool signal_main_thread(int pid, int signal, bool main_blocks) {
  if (main_blocks) return ::kill(pid, signal) == 0;
  return ::syscall(SYS_tgkill, pid, pid, signal) == 0;
}

bool has(const std::optional<uint64_t>& mask, int signal) {
  return signal > 0 && signal <= 64 && ((*mask >> (signal - 1)) & 1) != 0;
}

}  // namespace

std::vector<PyThreadStack> parse_faulthandler(std::string_view text) {
  std::vector<PyThreadStack> out;
  bool open = false;  // the last thread in `out` still takes lines
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    bool partial = nl == std::string_view::npos;
    std::string_view line = text.substr(pos, partial ? std::string_view::npos : nl - pos);
    pos = partial ? text.size() : nl + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (partial) {
      // The dump was cut mid-line (read while still being written, or the process died).
      if (open) out.back().truncated = true;
      break;
    }
    if (auto header = parse_header(line)) {
      out.push_back(std::move(*header));
      open = true;
      continue;
    }
    if (!open) continue;
    PyThreadStack& t = out.back();
    if (auto frame = parse_frame(line)) {
      t.frames.push_back(std::move(*frame));
    } else if (line == "  <no Python frame>") {
      t.no_python_frame = true;
    } else if (line == "  ...") {
      t.elided = true;
    } else if (starts_with(line, "  ")) {
      // "  Garbage-collecting" and other notes: keep the thread open.
    } else {
      // A blank line between threads, "..." for more threads than faulthandler prints, or a
      // section newer Pythons add (C stacks): this thread's Python frames are over.
      open = false;
    }
  }
  // A thread whose header came last with nothing under it was cut off.
  if (open && out.back().frames.empty() && !out.back().no_python_frame) out.back().truncated = true;
  return out;
}

std::string format_frame(const PyFrame& f) {
  std::string s = f.file.empty() ? "???" : f.file;
  s += ":";
  s += f.line ? std::to_string(*f.line) : "???";
  s += " in ";
  s += f.function.empty() ? "???" : f.function;
  return s;
}

void annotate_source(std::vector<PyThreadStack>& stacks) {
  std::unordered_map<std::string, std::vector<std::string>> cache;
  for (PyThreadStack& t : stacks) {
    for (PyFrame& f : t.frames) {
      if (f.file.empty() || !f.line || *f.line <= 0 || f.file.front() == '<') continue;
      auto it = cache.find(f.file);
      if (it == cache.end()) {
        std::vector<std::string> lines;
        std::ifstream in(f.file);
        if (in) {
          in.seekg(0, std::ios::end);
          if (in.tellg() <= kMaxSourceBytes) {
            in.seekg(0);
            for (std::string l; std::getline(in, l);) lines.push_back(std::move(l));
          }
        }
        it = cache.emplace(f.file, std::move(lines)).first;
      }
      const auto& lines = it->second;
      if (size_t(*f.line) > lines.size()) continue;
      std::string_view l = lines[size_t(*f.line) - 1];
      size_t b = l.find_first_not_of(" \t");
      size_t e = l.find_last_not_of(" \t\r");
      if (b != std::string_view::npos) f.code = std::string(l.substr(b, e - b + 1));
    }
  }
}

std::string stack_file(const std::string& run_dir, int pid) {
  return run_dir + "/stack-" + std::to_string(pid) + ".txt";
}

std::vector<StackCapture> capture_stacks(const std::vector<int>& pids, const std::string& run_dir,
                                         int signal, int wait_ms) {
  struct Pending {
    size_t index;
    std::string path;
    int64_t start;      // file size before the signal
    int64_t seen;       // last size seen
    int64_t changed_ns; // when it last grew
    int64_t sent_ns;    // when the safe-point signal was sent
    bool native_left;   // the native signal is caught and not yet sent
    bool main_blocks_native;
  };
  const int native = native_stack_signal(signal);
  std::vector<StackCapture> out(pids.size());
  std::vector<Pending> pending;
  for (size_t i = 0; i < pids.size(); ++i) {
    StackCapture& c = out[i];
    c.pid = pids[i];
    if (!alive(c.pid)) {
      c.gone = true;
      c.note = "gone";
      continue;
    }
    ProcessProbe probe = probe_process(c.pid, false);
    if (!probe.caught_signals || !probe.main_blocked_signals) {
      c.note = "cannot read /proc/" + std::to_string(c.pid) + "/status";
      continue;
    }
    const bool safe = has(probe.caught_signals, signal);
    const bool fallback = has(probe.caught_signals, native);
    if (!safe && !fallback) {
      c.note = "no handler for signal " + std::to_string(signal) +
               " (the hooks are not installed there; the signal would end it)";
      continue;
    }
    std::string path = stack_file(run_dir, c.pid);
    int64_t start = std::max<int64_t>(file_size(path), 0);
    const int first = safe ? signal : native;
    const bool main_blocks = has(probe.main_blocked_signals, first);
    if (!signal_main_thread(c.pid, first, main_blocks)) {
      c.gone = errno == ESRCH;
      c.note = c.gone ? "gone" : "cannot signal it";
      continue;
    }
    c.native = first == native;
    pending.push_back({i, std::move(path), start, start, 0, now_ns(), safe && fallback,
                       has(probe.main_blocked_signals, native)});
  }

  const int64_t deadline = now_ns() + int64_t(wait_ms) * 1'000'000;
  while (!pending.empty()) {
    int64_t now = now_ns();
    bool last_round = now >= deadline;
    for (size_t k = 0; k < pending.size();) {
      Pending& p = pending[k];
      StackCapture& c = out[p.index];
      int64_t size = file_size(p.path);
      if (size >= 0 && size < p.start) p.start = p.seen = 0;  // the file was replaced
      if (size > p.seen) {
        p.seen = size;
        p.changed_ns = now;
      }
      bool grew = p.seen > p.start;
      bool quiet = grew && now - p.changed_ns >= int64_t(kQuietMs) * 1'000'000;
      bool vanished = !alive(c.pid);
      if (!grew && p.native_left && !vanished && !last_round &&
          now - p.sent_ns >= int64_t(kSafePointWaitMs) * 1'000'000) {
        // No safe point reached: the main thread is in C code. Ask for its stack from the
        // C handler, unless it sleeps uninterruptibly (it would take both signals on waking).
        p.native_left = false;
        if (process_state(c.pid) != "D" && signal_main_thread(c.pid, native, p.main_blocks_native))
          c.native = true;
      }
      if (quiet || vanished || last_round) {
        c.text = read_range(p.path, p.start, p.seen);
        if (vanished) {
          c.gone = true;
          c.note = "gone";
        } else if (!grew) {
          c.note = "no stack within " + std::to_string(wait_ms) +
                   " ms (a process in uninterruptible sleep takes signals only when it wakes)";
        } else if (!quiet) {
          c.note = "stack still being written after " + std::to_string(wait_ms) + " ms";
        }
        pending.erase(pending.begin() + std::ptrdiff_t(k));
      } else {
        ++k;
      }
    }
    if (!pending.empty()) sleep_ms(kPollMs);
  }
  return out;
}

}  // namespace dldoctor::watchdog
