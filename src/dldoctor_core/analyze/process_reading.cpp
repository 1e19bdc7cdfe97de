// Frames are matched by path suffix and function name, the way faulthandler prints them, so
// a recorded stack and a live one read the same; the source line (when it could be read)
// settles what a name alone cannot, e.g. whether fetch() is at `self.collate_fn(data)`.
#include "dldoctor_core/analyze/process_reading.hpp"

#include <algorithm>
#include <array>
#include <string_view>

namespace dldoctor::analyze {

using watchdog::PyThreadStack;

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}
bool contains(std::string_view s, std::string_view part) {
  return s.find(part) != std::string_view::npos;
}
/// `file` is `suffix` or ends with "/" + suffix.
bool path_is(std::string_view file, std::string_view suffix) {
  if (file == suffix) return true;
  return file.size() > suffix.size() && ends_with(file, suffix) &&
         file[file.size() - suffix.size() - 1] == '/';
}

bool in_fetch_py(const PyFrame& f) { return path_is(f.file, "torch/utils/data/_utils/fetch.py"); }
bool is_fetch(const PyFrame& f) { return f.function == "fetch" && in_fetch_py(f); }
bool in_collate_py(const PyFrame& f) {
  return path_is(f.file, "torch/utils/data/_utils/collate.py");
}
bool is_worker_loop(const PyFrame& f) {
  return f.function == "_worker_loop" && path_is(f.file, "torch/utils/data/_utils/worker.py");
}
bool is_loader_wait(const PyFrame& f) {
  static constexpr std::array<std::string_view, 5> kWaits = {"__next__", "_next_data", "_get_data",
                                                             "_try_get_data", "_next_index"};
  return path_is(f.file, "torch/utils/data/dataloader.py") &&
         std::find(kWaits.begin(), kWaits.end(), f.function) != kWaits.end();
}
/// The main process ending an iterator (dropped, exhausted, or cut short): torch joins each
/// worker for at most a few seconds and then terminates it, so this is an end, not a hang.
bool is_shutdown(const PyFrame& f) {
  return f.function == "_shutdown_workers" && path_is(f.file, "torch/utils/data/dataloader.py");
}
bool is_bootstrap(const PyFrame& f) {
  // A worker importing modules before its loop (torch under spawn): its stack can be deeper
  // than the frames faulthandler writes, so the spawn frames at the bottom may be cut off.
  return f.file == "<frozen importlib._bootstrap>" || path_is(f.file, "multiprocessing/spawn.py") ||
         path_is(f.file, "multiprocessing/forkserver.py") ||
         path_is(f.file, "multiprocessing/popen_fork.py");
}
/// dldoctor's own hook frames sit between torch and the user's code; they are not a place.
bool is_transparent(const PyFrame& f) {
  return contains(f.file, "/dldoctor/") && !contains(f.file, "/tests/");
}

/// The frame's function is the callable named by `qualname` ("pkg.mod.Cls.fn" -> "fn"; a
/// callable object's frame is its __call__).
bool names(const PyFrame& f, std::string_view qualname) {
  if (qualname.empty() || f.function.empty()) return false;
  size_t dot = qualname.rfind('.');
  std::string_view last = dot == std::string_view::npos ? qualname : qualname.substr(dot + 1);
  return f.function == last || f.function == qualname;
}

/// The first frame called from frames[at] (toward the top), skipping frames of the same file
/// (a list comprehension is its own frame in Python < 3.12) and dldoctor's hook frames.
std::optional<size_t> callee(const std::vector<PyFrame>& frames, size_t at) {
  for (size_t i = at; i-- > 0;) {
    const PyFrame& f = frames[i];
    if (f.file == frames[at].file && !f.function.empty() && f.function.front() == '<') continue;
    if (is_transparent(f)) continue;
    return i;
  }
  return std::nullopt;
}

template <typename Pred>
std::optional<size_t> find_frame(const std::vector<PyFrame>& frames, Pred pred) {
  for (size_t i = 0; i < frames.size(); ++i) {
    if (pred(frames[i])) return i;
  }
  return std::nullopt;
}

/// The thread of a process that shows the loader: the one with the fetcher, else the worker
/// loop or the DataLoader's wait, else a process bootstrap, else the main thread (listed last
/// by faulthandler, which walks the interpreter's threads newest first).
int pick_thread(const std::vector<PyThreadStack>& stacks) {
  auto first_with = [&](auto pred) -> int {
    for (size_t t = 0; t < stacks.size(); ++t) {
      if (find_frame(stacks[t].frames, pred)) return int(t);
    }
    return -1;
  };
  for (auto pred : {+[](const PyFrame& f) { return is_fetch(f); },
                    +[](const PyFrame& f) { return is_worker_loop(f); },
                    +[](const PyFrame& f) { return is_loader_wait(f); },
                    +[](const PyFrame& f) { return is_shutdown(f); },
                    +[](const PyFrame& f) { return is_bootstrap(f); }}) {
    if (int t = first_with(pred); t >= 0) return t;
  }
  for (size_t t = stacks.size(); t-- > 0;) {
    if (!stacks[t].frames.empty()) return int(t);
  }
  return -1;
}

/// Reads a stack under fetch(): the callee of fetch is collate_fn or the dataset.
void read_fetch(const std::vector<PyFrame>& frames, size_t fetch_at, const LoaderContext* loader,
                ProcessReading& r) {
  const PyFrame& fetch = frames[fetch_at];
  std::optional<size_t> c = callee(frames, fetch_at);
  std::string_view collate_name = loader ? std::string_view(loader->collate_fn) : "";
  // The frame of the user's collate_fn (by name) or torch's default collate, anywhere above.
  std::optional<size_t> named;
  for (size_t i = 0; i < fetch_at; ++i) {
    if (names(frames[i], collate_name) || in_collate_py(frames[i])) named = i;
  }
  bool collate;
  if (!fetch.code.empty()) {
    collate = contains(fetch.code, "collate_fn");  // the source line settles it
  } else if (named) {
    collate = true;
  } else {
    // A callable collate object shows up as __call__ right under fetch.
    collate = c && !collate_name.empty() && frames[*c].function == "__call__";
  }
  r.place = collate ? Place::kCollate : Place::kGetitem;
  if (collate && named) {
    r.place_frame = named;
  } else {
    r.place_frame = c ? c : std::optional<size_t>(fetch_at);
  }
}

/// Reads a worker stack that is not in fetch().
void read_worker_loop(const std::vector<PyFrame>& frames, size_t loop_at,
                      const LoaderContext* loader, int worker, ProcessReading& r) {
  std::optional<size_t> c = callee(frames, loop_at);
  const PyFrame& loop = frames[loop_at];
  if (c && path_is(frames[*c].file, "multiprocessing/queues.py")) {
    // The loop blocks in index_queue.get() between batches, and put()s each result.
    r.place = frames[*c].function == "put" ? Place::kSending : Place::kIdle;
    r.place_frame = c;
    return;
  }
  bool init_named = loader && c && names(frames[*c], loader->worker_init_fn);
  bool init_line = contains(loop.code, "init_fn");
  bool before_first = false;
  if (loader) {
    auto it = loader->batches_returned.find(worker);
    before_first = it != loader->batches_returned.end() && it->second == 0;
  }
  r.place = init_named || init_line || before_first ? Place::kWorkerInit : Place::kOther;
  r.place_frame = c ? c : std::optional<size_t>(loop_at);
}

}  // namespace

const char* place_name(Place p) noexcept {
  // In the order of Place.
  static constexpr const char* kNames[] = {
      "unknown", "gone",    "idle",        "in_loader", "outside_loader", "shutting_down",
      "collate", "getitem", "worker_init", "sending",   "other"};
  static_assert(std::size(kNames) == size_t(Place::kOther) + 1, "a name for every Place");
  return kNames[size_t(p)];
}

const PyFrame* ProcessReading::frame(const ProcessCapture& p) const noexcept {
  if (thread < 0 || !place_frame) return nullptr;
  const auto& frames = p.stacks[size_t(thread)].frames;
  return *place_frame < frames.size() ? &frames[*place_frame] : nullptr;
}

const PyFrame* ProcessReading::top(const ProcessCapture& p) const noexcept {
  if (thread < 0 || p.stacks[size_t(thread)].frames.empty()) return nullptr;
  return &p.stacks[size_t(thread)].frames.front();
}

std::string sync_wait_of(const PyFrame& f) {
  const std::string& fn = f.function;
  if (path_is(f.file, "threading.py")) {
    if (fn == "join" || fn == "_wait_for_tstate_lock") return "thread join";
    if (fn == "wait" || fn == "wait_for") return "condition";
    return "lock";  // acquire, __enter__, Semaphore/Barrier internals
  }
  if (path_is(f.file, "queue.py") || path_is(f.file, "multiprocessing/queues.py")) return "queue";
  if (path_is(f.file, "multiprocessing/synchronize.py")) {
    return fn == "wait" || fn == "wait_for" ? "condition" : "lock";
  }
  if (path_is(f.file, "multiprocessing/connection.py")) return "pipe";
  if (path_is(f.file, "multiprocessing/managers.py")) return "manager";
  if (path_is(f.file, "concurrent/futures/_base.py")) return "future";
  // A C-level wait has no Python frame of its own: the caller's line shows the call.
  const std::string& code = f.code;
  if (contains(code, ".acquire(")) return "lock";
  if (code.rfind("with ", 0) == 0 &&
      (contains(code, "lock") || contains(code, "Lock") || contains(code, "mutex"))) {
    return "lock";
  }
  if (contains(code, ".wait(")) return "condition";
  if (contains(code, ".get(") &&
      (contains(code, "queue") || contains(code, "Queue") || contains(code, "q.get("))) {
    return "queue";
  }
  if (contains(code, ".join(") && (contains(code, "thread") || contains(code, "Thread"))) {
    return "thread join";
  }
  return "";
}

ProcessReading read_process(const ProcessCapture& p, const LoaderContext* loader) {
  ProcessReading r;
  r.cpu_share = cpu_share(p);
  r.busy = r.cpu_share && *r.cpu_share >= kBusyCpuShare;
  r.io_wait = p.state == "D";
  if (p.gone || p.state == "Z" || p.state == "X" || p.state == "gone") {
    r.place = Place::kGone;
    return r;
  }
  r.thread = pick_thread(p.stacks);
  if (r.thread >= 0) {
    const auto& frames = p.stacks[size_t(r.thread)].frames;
    if (auto at = find_frame(frames, is_fetch)) {
      read_fetch(frames, *at, loader, r);
    } else if (p.worker < 0) {
      if (auto down = find_frame(frames, is_shutdown)) {
        r.place = Place::kShuttingDown;
        r.place_frame = down;
      } else {
        auto at = find_frame(frames, is_loader_wait);
        r.place = at ? Place::kInLoader : Place::kOutsideLoader;
        r.place_frame = at ? at : std::optional<size_t>(0);
      }
    } else if (auto loop = find_frame(frames, is_worker_loop)) {
      read_worker_loop(frames, *loop, loader, p.worker, r);
    } else if (auto boot = find_frame(frames, is_bootstrap)) {
      r.place = Place::kWorkerInit;  // still starting: imports, unpickling the dataset
      r.place_frame = boot;
    } else {
      r.place = Place::kOther;
      r.place_frame = 0;
    }
    if (!frames.empty()) r.wait = sync_wait_of(frames.front());
  }
  // The kernel view fills in what the stack cannot show: a C-level wait in a futex.
  if (r.wait.empty() && !r.busy && (p.syscall == "futex" || p.wchan.rfind("futex", 0) == 0)) {
    r.wait = "futex";
  }
  return r;
}

bool iterated_by(const LoaderContext& l, int main_pid) noexcept {
  return l.main_pid <= 0 || l.main_pid == main_pid;
}

int effective_loader(const ProcessCapture& p, const HangContext& context) noexcept {
  if (p.worker >= 0 || p.loader >= 0) return p.loader;
  // Several main processes (one per rank): only the loaders this one iterates.
  int in_process = -1, count = 0, mine = 0, only = -1;
  for (const LoaderContext& l : context.loaders) {
    if (!iterated_by(l, p.pid)) continue;
    ++mine;
    only = l.loader;
    if (l.num_workers && *l.num_workers == 0) {
      in_process = l.loader;
      ++count;
    }
  }
  if (count == 1) return in_process;
  if (mine == 1) return only;
  return -1;
}

}  // namespace dldoctor::analyze
