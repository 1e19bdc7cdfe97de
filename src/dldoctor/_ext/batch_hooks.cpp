// The per-batch hooks without a Python frame. Callables that stand in for torch's
// `_MapDatasetFetcher.fetch` / `_IterableDatasetFetcher.fetch` (in workers only), a worker's
// index-queue `get` and the iterators' `_next_data` / `_get_data` (and, for a measured fetch
// only, the fetcher's `collate_fn`): each calls the original with the same arguments
// (vectorcall, no tuple), times it and writes the batch's event straight into the ring. A
// single-process iterator's fetch is its `_next_data` call: the main process has no fetch
// hook, one C level less on every batch of the fastest loops. What is rare (an exception,
// a profiled fetch, a slow batch, a batch's bytes, CUDA memory) calls back into dldoctor.job.
//
// A C callable adds no frame to a traceback, so an exception reaches the user exactly as it
// would without dldoctor. Every function here runs with the GIL held; the state is this
// process's (a forked worker resets its own in BatchContext.begin_worker).
#include <Python.h>
#include <nanobind/nanobind.h>
#include <nanobind/stl/string.h>
#include <structmember.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <new>
#include <string>
#include <unordered_map>

#include "dldoctor_core/common/clock.hpp"
#include "dldoctor_core/trace/batch_sampler.hpp"
#include "dldoctor_core/trace/event.hpp"
#include "dldoctor_core/trace/slow_fetch.hpp"
#include "event_glue.hpp"
#include "register.hpp"

namespace nb = nanobind;

namespace dldoctor::ext {
namespace {

using trace::EventKind;

// A profile candidate is every kProfileEvery-th fetch of a process, the first at fetch
// kProfileFirst (past warm-up: first reads, lazy imports). The loader's schedule in the ring
// (EventRing::claim_profile) spaces its profiles in time, across all its processes: the
// first kProfileMinIntervalNs after the previous, the spacing doubling up to
// kProfileMaxIntervalNs. A profiled fetch runs about 2x slower and costs ~0.1 ms to
// summarise, ~0.4 ms the first time in a freshly forked worker (dldoctor.job.profiling loads
// the profiler in the main process: loaded by the worker, ~7 ms).
constexpr uint64_t kProfileEvery = 50;
constexpr uint64_t kProfileFirst = 10;
constexpr int64_t kProfileMinIntervalNs = 500'000'000;
constexpr int64_t kProfileMaxIntervalNs = 8'000'000'000;
// The costly details of a measured fetch, thread CPU time (a syscall, ~0.6 us on a VM, twice)
// and the bytes of the batch (a walk in Python, 0.2-1 us), are taken when the previous fetch
// took at least kDetailAlwaysNs (then they are < 0.5% of it), else on every kDetailEvery-th
// measured fetch: big batches, the ones that fill /dev/shm, are measured every time.
constexpr int64_t kDetailAlwaysNs = 250'000;
constexpr uint64_t kDetailEvery = 16;
// CUDA memory is read at a batch hand-out at most this often (a note a second sizes a batch).
constexpr int64_t kCudaMemoryEveryNs = 1'000'000'000;
// Measured hand-outs a second of a fast single-process loop (its sampler's, instead of a
// worker's trace::kMeasuredPerSecond): such a hand-out is its batch's fetch and hand-out at
// once, timed in the process the loop runs in, and, coming once in hundreds of batches, it
// runs cold. A tiny-batch loop kept 0.974 of its throughput at 250-500 a second, 0.989 with
// almost none (bench/hooks_ab.py; a pass-through hook 0.992); 64-128 a second is still
// 640-1,280 batches in a rule's 10 s window.
constexpr int64_t kHandoutsMeasuredPerSecond = 64;
// A loader with workers has its hand-outs sampled from this rate on (at
// kHandoutsMeasuredPerSecond), today the same as its workers' fetches (trace::
// kSampleAbovePerSecond) but for a reason of its own, so kept apart: its hand-out event is the
// consumer's wait alone (the fetch is the worker's own event), each one costs the main process
// ~2 us of attribute reads, clock reads and the ring on a ~500 us batch, and such a loop is
// bound by the round trip between the processes, which any work in between lengthens. The
// hang doctor still learns each hand-out: the next batch due goes into the ring's progress
// table (one word) at every one.
constexpr int64_t kMultiHandoutsSampleAbovePerSecond = 500;
constexpr int64_t kLongAgoNs = int64_t{1} << 62;
// Hand-out samplers remembered per loader (a new epoch goes on from its loader's last);
// past this many loaders the memory starts over.
constexpr size_t kMaxRememberedLoaders = 4096;

/// CLOCK_MONOTONIC at a few ms resolution, for ~5 ns instead of ~40 (a VM's precise clock):
/// enough to decide which fetches to measure and to notice one of >= 10 ms among the others.
inline int64_t coarse_now_ns() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

/// One stream of fetches: a worker's, or those a single-process iterator does itself.
struct FetchStream {
  trace::BatchSampler sampler;
  trace::SlowFetchDetector slow;
  uint64_t fetches = 0;                ///< fetches that returned a batch
  uint64_t measured = 0;               ///< of those, measured (every kDetailEvery-th: details)
  int64_t last_fetch_ns = kLongAgoNs;  ///< the previous fetch (first: "long", so it is detailed)

  void reset() noexcept {
    sampler.reset();
    slow.reset();
    fetches = 0;
    measured = 0;
    last_fetch_ns = kLongAgoNs;
  }
};

struct IterState;

/// This process's hook context (one object, `_ext.batch_context`): what the fetch hook
/// attributes a batch to, the fetch in progress, and the callbacks into dldoctor.job.
struct BatchContext {
  PyObject ob_base;       // PyObject_HEAD
  int loader;             ///< 0: this process's fetches are not watched
  int worker;             ///< -1: the main process
  long long index;        ///< batch index of the fetch in progress (-1 unknown)
  long long epoch;        ///< a worker's epoch (persistent workers count on), 0 unknown
  char index_from_frame;  ///< no index-queue proxy here: read `idx` from the caller's frame
  char wait_hooked;       ///< _get_data is hooked (else the main process's wait is unknown)
  char worker_started;    ///< the _worker_loop hook ran in this process
  long long collate_ns;   ///< of the fetch in progress
  long long collate_samples;
  /// The fetch in progress does not auto-collate (batch_size=None): its collate_fn gets the
  /// one item the dataset yielded, whose length is not a count of samples.
  char collate_one_item;
  unsigned long long epoch_fetches0;  ///< worker_stream->fetches when this epoch began
  unsigned long long process_fetches;  ///< measured-or-not fetches of this process (profiles)
  long long cuda_next_ns;              ///< next CUDA memory reading (main process)
  FetchStream* worker_stream;          ///< this worker's fetches
  PyObject* current_it;   ///< borrowed: the iterator whose multi-process _next_data runs
  IterState* current_st;  ///< borrowed: its state
  IterState* cached_st;   ///< the state last looked up (strong): most batches skip the dict
  // Set by configure() (strong references); nullptr until then and after reset().
  PyObject* iters;              ///< dict: id(iterator) -> IterState
  PyObject* pin_ns;             ///< dict: id(pinned batch) -> ns spent pinning it
  PyObject* on_batch_bytes;     ///< (batch) -> int
  PyObject* on_fetch_error;     ///< (exc, loader, worker, index, t0_ns, indices or None)
  PyObject* on_slow_fetch;      ///< (loader, worker, index, fetch_ns, mean_ns, indices)
  PyObject* on_frame_index;     ///< () -> int
  PyObject* on_profile_start;   ///< () -> profiler or None
  PyObject* on_profile_finish;  ///< (profiler, loader, worker, index, epoch, fetch_ns or -1)
  PyObject* on_next_error;      ///< (iterator, state, exc)
  PyObject* on_get_data_error;  ///< (iterator, exc)
  PyObject* on_cuda_memory;     ///< (loader)
};

/// A main-process iterator's state (`_ext.IterState`), found through BatchContext.iters.
struct IterState {
  PyObject ob_base;  // PyObject_HEAD
  int loader_id;
  char multiprocess;
  char ended;
  char in_next;  ///< its _next_data is running (multi-process)
  int pid;       ///< the process that created it: a forked child inherits it, must not end it
  long long epoch;
  long long batches;       ///< handed out in this epoch
  long long last_handout;  ///< ns of the last hand-out (0: none yet this epoch)
  long long wait_ns;       ///< filled by _get_data during one _next_data
  long long got_idx;
  int got_worker;
  PyObject* died;       ///< set of worker ids reported dead
  PyObject* ref;        ///< weakref to the iterator, or None
  FetchStream* stream;  ///< single-process: the fetches it does itself (its measured ones)
  /// Which hand-outs are measured (a fast loop's are sampled; a loader with workers from a
  /// lower rate on, kMultiHandoutsSampleAbovePerSecond).
  trace::BatchSampler handouts;
  char measure_next;  ///< the next hand-out is measured (decided at this one)
};

/// Which original a HotMethod stands in for.
enum class Role : int { kFetch, kCollate, kIndexGet, kSingleNext, kMultiNext, kGetData };
constexpr const char* kRoleNames[] = {"fetch",       "collate",    "index_get",
                                      "single_next", "multi_next", "get_data"};

struct HotMethod {
  PyObject ob_base;  // PyObject_HEAD
  vectorcallfunc vectorcall;
  PyObject* orig;
  PyObject* dict;
  PyObject* role_name;  ///< interned: "fetch", "collate", ...
  Role role;
};

PyObject* g_role_names[std::size(kRoleNames)] = {};

/// Each loader's hand-out sampler as its last epoch left it (single-process iterators): the
/// next epoch goes on from there, rate window included, so a fast loader whose epochs are
/// shorter than a window is still sampled.
std::unordered_map<int, trace::BatchSampler>* g_loader_samplers = nullptr;

/// The unmeasured hand-outs of a fast single-process loop, decided a run at a time
/// (BatchSampler::plan) at a measured one and counted here until the run ends. Such a
/// hand-out reads this one cache line and the hook, nothing else: no state lookup, weak
/// reference, clock, sample or pinning bookkeeping. On a loaded machine each cache line a
/// hand-out touches costs it about 0.1 us, as much as the rest of a 25 us tiny batch's
/// difference (bench/hooks_ab.py). One lane: the loop's iterator; any other runs as before.
struct alignas(64) Lane {
  PyObject* it;      ///< borrowed: the iterator whose hand-outs run through (nullptr: none)
  IterState* st;     ///< strong: its state
  PyObject* watch;   ///< strong: a weak reference to `it` whose callback closes the lane
  uint32_t left;     ///< hand-outs of the run still to go
  uint32_t skipped;  ///< hand-outs of the run so far (the one running included)
  int64_t since;     ///< coarse ns the run began
  int64_t last_ns;   ///< ns of the run's last hand-out (0: the run was cut short)
  char busy;         ///< one of its hand-outs is running (a nested loader opens no lane)
};
Lane g_lane = {};
/// lane_closed(ref): the callback of Lane::watch.
PyObject* g_lane_closer = nullptr;

PyTypeObject* g_hot_type = nullptr;
PyTypeObject* g_iter_type = nullptr;
BatchContext* g = nullptr;
PyObject* g_str_collate_fn = nullptr;
PyObject* g_str_auto_collation = nullptr;
PyObject* g_str_dataset_fetcher = nullptr;
PyObject* g_str_rcvd_idx = nullptr;
PyObject* g_str_task_info = nullptr;
PyObject* g_str_get = nullptr;

// -- Small helpers ----------------------------------------------------------------------------
inline PyObject* call_orig(HotMethod* m, PyObject* const* args, size_t nargsf, PyObject* kw) {
  return PyObject_Vectorcall(m->orig, args, nargsf, kw);
}

/// An exception taken out of the interpreter while a callback runs, then put back.
struct PendingError {
  PyObject *type = nullptr, *value = nullptr, *tb = nullptr;
  void take() {
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != nullptr && value != nullptr) PyException_SetTraceback(value, tb);
  }
  bool is(PyObject* exc_type) const {
    return type != nullptr && PyErr_GivenExceptionMatches(type, exc_type);
  }
  void restore() { PyErr_Restore(type, value, tb); }
  void drop() {
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
  }
};

/// After a callback failed: its ordinary errors are dropped (a hook never changes what the
/// job sees), but KeyboardInterrupt, SystemExit and the like stay raised, as they would in
/// Python code. True when the job may go on.
bool settle_callback_error() {
  if (!PyErr_Occurred()) return true;
  if (PyErr_ExceptionMatches(PyExc_Exception)) {
    PyErr_Clear();
    return true;
  }
  return false;
}

/// fn(args) for a callback whose result is ignored; false only on a BaseException to raise.
template <typename... A>
bool call_back(PyObject* fn, const char* format, A... args) {
  if (fn == nullptr) return true;
  PyObject* r = PyObject_CallFunction(fn, format, args...);
  Py_XDECREF(r);
  return settle_callback_error();
}

long long as_ll(PyObject* o, long long fallback) {
  if (o == nullptr || !PyLong_Check(o)) return fallback;
  long long v = PyLong_AsLongLong(o);
  if (v == -1 && PyErr_Occurred()) {
    PyErr_Clear();
    return fallback;
  }
  return v;
}

/// d.get(key) for the dicts torch keeps; a new reference or nullptr (never an error).
PyObject* dict_get(PyObject* d, PyObject* key) {
  if (d == nullptr || key == nullptr) return nullptr;
  PyObject* v = nullptr;
  if (PyDict_Check(d)) {
    v = PyDict_GetItemWithError(d, key);
    Py_XINCREF(v);
  } else {
    v = PyObject_CallMethodOneArg(d, g_str_get, key);
    if (v == Py_None) Py_CLEAR(v);
  }
  if (v == nullptr) PyErr_Clear();
  return v;
}

/// The object a weak reference points to (borrowed), nullptr when dead or not a weakref.
PyObject* referent(PyObject* ref) {
  if (ref == nullptr || !PyWeakref_Check(ref)) return nullptr;
  PyObject* o = PyWeakref_GetObject(ref);
  return o == Py_None ? nullptr : o;
}

/// The iterator's state when it is watched (borrowed), else nullptr. The last one found is
/// kept (it is the same one batch after batch); it is valid while its weak reference still
/// points at `it`, and the cache is dropped whenever states are forgotten (forget_states).
IterState* state_of(PyObject* it) {
  if (g->iters == nullptr || !writer_active()) return nullptr;
  if (IterState* st = g->cached_st; st != nullptr && referent(st->ref) == it) return st;
  PyObject* key = PyLong_FromVoidPtr(it);
  if (key == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  PyObject* found = PyDict_GetItemWithError(g->iters, key);
  Py_DECREF(key);
  if (found == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  if (Py_TYPE(found) != g_iter_type) return nullptr;
  Py_INCREF(found);
  Py_XSETREF(g->cached_st, reinterpret_cast<IterState*>(found));
  return g->cached_st;
}

/// ns spent pinning `data` (pin_memory hook), taken out of the pending dict; -1 when none.
long long pop_pin_ns(PyObject* data) {
  PyObject* pins = g->pin_ns;
  if (pins == nullptr || !PyDict_Check(pins) || PyDict_GET_SIZE(pins) == 0) return -1;
  PyObject* key = PyLong_FromVoidPtr(data);
  if (key == nullptr) {
    PyErr_Clear();
    return -1;
  }
  long long ns = -1;
  if (PyObject* v = PyDict_GetItemWithError(pins, key)) {
    ns = as_ll(v, -1);
    if (PyDict_DelItem(pins, key) < 0) PyErr_Clear();
  } else {
    PyErr_Clear();
  }
  Py_DECREF(key);
  return ns;
}

/// After a hand-out: CUDA memory, at most once a second. False on a BaseException to raise.
bool maybe_cuda_memory(int64_t t1, int loader) {
  if (t1 < g->cuda_next_ns) return true;
  g->cuda_next_ns = t1 + kCudaMemoryEveryNs;
  return call_back(g->on_cuda_memory, "i", loader);
}

PyObject* new_hot(Role role, PyObject* orig);

// -- fetch, collate, index queue (workers; a measured single-process batch swaps collate too) ---
/// A measured fetch times its collate_fn: a collate hook stands in for the fetcher's own for
/// that one call (an unmeasured fetch calls the user's collate_fn directly, no extra level).
struct CollateSwap {
  PyObject* fetcher = nullptr;  ///< strong, while the swap stands
  PyObject* user = nullptr;     ///< the fetcher's collate_fn, put back by restore()

  void install(PyObject* f) {
    g->collate_one_item = 0;
    if (PyObject* ac = PyObject_GetAttr(f, g_str_auto_collation)) {
      g->collate_one_item = PyObject_IsTrue(ac) == 0;
      Py_DECREF(ac);
    }
    PyErr_Clear();
    PyObject* cf = PyObject_GetAttr(f, g_str_collate_fn);
    if (cf == nullptr) {
      PyErr_Clear();
      return;
    }
    PyObject* hook = new_hot(Role::kCollate, cf);
    if (hook == nullptr || PyObject_SetAttr(f, g_str_collate_fn, hook) < 0) {
      PyErr_Clear();
      Py_XDECREF(hook);
      Py_DECREF(cf);
      return;
    }
    Py_DECREF(hook);
    Py_INCREF(f);
    fetcher = f;
    user = cf;
  }
  /// Call with no exception pending.
  void restore() {
    if (user == nullptr) return;
    if (PyObject_SetAttr(fetcher, g_str_collate_fn, user) < 0) PyErr_Clear();
    Py_CLEAR(user);
    Py_CLEAR(fetcher);
  }
};

/// Every fetch that may be profiled counts (a worker's each, a single-process iterator's
/// measured ones); a candidate that `loader`'s schedule allows asks dldoctor.job.profiling
/// for a running profiler. False on a BaseException to raise; else `*profiler` is the
/// profiler or nullptr.
bool maybe_profile(BatchContext& c, int loader, PyObject** profiler) {
  *profiler = nullptr;
  if (++c.process_fetches % kProfileEvery != kProfileFirst % kProfileEvery ||
      c.on_profile_start == nullptr ||
      !writer_claim_profile(loader, kProfileMinIntervalNs, kProfileMaxIntervalNs))
    return true;
  *profiler = PyObject_CallNoArgs(c.on_profile_start);
  if (*profiler == Py_None) Py_CLEAR(*profiler);
  return settle_callback_error();
}

/// The profiled fetch ended (fetch_ns -1: it raised); drops the profiler. False on a
/// BaseException to raise.
bool finish_profile(BatchContext& c, PyObject* profiler, int loader, int worker, long long idx,
                    long long fetch_ns) {
  if (profiler == nullptr) return true;
  const bool go_on = call_back(c.on_profile_finish, "OiiLLL", profiler, loader, worker, idx,
                               (long long)c.epoch, fetch_ns);
  Py_DECREF(profiler);
  return go_on;
}

/// Whether a measured fetch of `s` also takes its costly details (thread CPU time, bytes).
inline bool wants_detail(const FetchStream& s) noexcept {
  return s.last_fetch_ns >= kDetailAlwaysNs || s.measured % kDetailEvery == 0;
}

/// The bytes of a measured batch when its details are taken, else -1. False in `*go_on` on a
/// BaseException to raise.
long long detail_bytes(BatchContext& c, bool detail, PyObject* data, bool* go_on) {
  if (!detail || c.on_batch_bytes == nullptr) return -1;
  PyObject* r = PyObject_CallOneArg(c.on_batch_bytes, data);
  const long long bytes = as_ll(r, -1);
  Py_XDECREF(r);
  *go_on = settle_callback_error() && *go_on;
  return bytes;
}

/// A worker's fetch (a DataLoader worker process; the main process has no fetch hook).
PyObject* fetch_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kw) {
  auto* m = reinterpret_cast<HotMethod*>(self);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  BatchContext& c = *g;
  // The fetcher keeps its class: assigning `__class__` would turn its attributes into a
  // dict for good, and every `self.dataset` of torch's fetch would then miss the
  // interpreter's attribute cache (4% of a tiny batch, more than the hook it saved).
  if (c.loader == 0 || nargs != 2 || kw != nullptr || !writer_active())
    return call_orig(m, args, nargsf, kw);
  FetchStream& s = *c.worker_stream;
  const int loader = c.loader, worker = c.worker;
  long long idx = c.index;
  if (c.index_from_frame && c.on_frame_index != nullptr) {
    PyObject* r = PyObject_CallNoArgs(c.on_frame_index);
    idx = as_ll(r, -1);
    Py_XDECREF(r);
    if (!settle_callback_error()) return nullptr;
  }
  PyObject* profiler = nullptr;
  if (!maybe_profile(c, loader, &profiler)) return nullptr;
  // The coarse clock decides; a measured fetch is then timed on the precise one, an
  // unmeasured one on the coarse one: its expected reading is the true time, so the slow-fetch
  // mean stays right, and a fetch reads past the 10 ms cut only when it took over 10 ms
  // minus one tick (4 ms at HZ=250).
  // The sample's bookkeeping waits for the fetch to return a batch (record() below).
  const int64_t coarse0 = coarse_now_ns();
  const bool sampled = s.sampler.decide(coarse0);
  const bool measure = sampled || profiler != nullptr;
  const bool detail = measure && wants_detail(s);
  c.collate_ns = 0;
  c.collate_samples = 0;
  CollateSwap collate;
  if (measure) collate.install(args[0]);
  const int64_t c0 = detail ? thread_cpu_ns() : 0;
  const int64_t t0 = measure ? now_ns() : coarse0;
  PyObject* data = call_orig(m, args, nargsf, kw);
  const int64_t t1 = measure ? now_ns() : coarse_now_ns();
  const int64_t c1 = detail ? thread_cpu_ns() : -1;
  if (data == nullptr) {
    PendingError err;
    err.take();
    collate.restore();
    bool go_on = finish_profile(c, profiler, loader, worker, idx, -1);
    // An IterableDataset's share of this worker ran out: the loop may go on with the others.
    if (err.is(PyExc_StopIteration))
      writer_emit(int64_t(EventKind::kWorkerDrained), loader, worker, -1, 0, now_ns(),
                  (long long)(s.fetches - c.epoch_fetches0), c.epoch, -1, -1, 0, 1);
    if (go_on && err.is(PyExc_Exception) && !err.is(PyExc_StopIteration))
      go_on = call_back(c.on_fetch_error, "OiiLLO", err.value ? err.value : Py_None, loader, worker,
                        idx, (long long)t0, args[1]);
    if (!go_on) {
      err.drop();
      return nullptr;
    }
    err.restore();
    return nullptr;
  }
  collate.restore();
  const int64_t d = t1 - t0;
  if (measure) s.last_fetch_ns = d;  // a coarse reading would make the next one look long
  ++s.fetches;
  s.measured += measure;
  s.sampler.record(sampled, profiler != nullptr, coarse0);
  const uint32_t weight = s.sampler.weight();
  const bool profiled = profiler != nullptr;
  bool go_on = finish_profile(c, profiler, loader, worker, idx, d);
  if (measure) {
    const long long bytes = detail_bytes(c, detail, data, &go_on);
    writer_emit(int64_t(EventKind::kWorkerBatch), loader, worker, idx,
                c.collate_samples ? c.collate_samples : 1, t0, d, c.collate_ns,
                detail ? c1 - c0 : -1, bytes, profiled ? trace::kProfiled : 0, weight);
  }
  if (s.slow.observe(d, s.fetches))
    go_on = call_back(c.on_slow_fetch, "iiLLLO", loader, worker, idx, (long long)d,
                      (long long)s.slow.mean_ns(), args[1]) &&
            go_on;
  if (!go_on) {
    Py_DECREF(data);
    return nullptr;
  }
  return data;
}

PyObject* collate_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kw) {
  auto* m = reinterpret_cast<HotMethod*>(self);
  BatchContext& c = *g;
  if (c.collate_one_item) {
    c.collate_samples = 1;  // one item of the dataset's own making (webdataset's .batched())
  } else if (PyVectorcall_NARGS(nargsf) >= 1) {
    const Py_ssize_t n = PyObject_Size(args[0]);
    if (n < 0) PyErr_Clear();
    c.collate_samples = n > 0 ? n : 1;
  }
  const int64_t t = now_ns();
  PyObject* r = call_orig(m, args, nargsf, kw);
  c.collate_ns = now_ns() - t;
  return r;
}

PyObject* index_get_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kw) {
  auto* m = reinterpret_cast<HotMethod*>(self);
  PyObject* r = call_orig(m, args, nargsf, kw);
  if (r == nullptr) return nullptr;
  if (PyTuple_CheckExact(r)) {
    if (PyTuple_GET_SIZE(r) >= 1) g->index = as_ll(PyTuple_GET_ITEM(r, 0), -1);
  } else if (r != Py_None) {
    ++g->epoch;  // _ResumeIteration: persistent workers start the next epoch
    g->epoch_fetches0 = g->worker_stream->fetches;
  }
  return r;
}

// -- the main process --------------------------------------------------------------------------
/// The exception path of both _next_data hooks: the state learns why (StopIteration: end of
/// epoch; another error: the loader raised), then the same exception goes on to the user.
PyObject* next_failed(PyObject* it, IterState* st) {
  PendingError err;
  err.take();
  Py_INCREF(st);
  const bool go_on = call_back(g->on_next_error, "OOO", it, reinterpret_cast<PyObject*>(st),
                               err.value ? err.value : Py_None);
  Py_DECREF(st);
  if (!go_on) {
    err.drop();
    return nullptr;
  }
  err.restore();
  return nullptr;
}

/// The state of the watched iterator a _next_data hook was called on (`args[0]`, borrowed);
/// nullptr: pass the call through.
IterState* next_state(PyObject* const* args, size_t nargsf, PyObject* kw) {
  return PyVectorcall_NARGS(nargsf) == 1 && kw == nullptr ? state_of(args[0]) : nullptr;
}

/// The run's hand-outs so far go into its state (batches, sample, the last hand-out's time)
/// as if each had been counted there; the next hand-out is the measured one. Nothing while
/// one of them runs: its count is in flight.
void lane_fold() noexcept {
  Lane& l = g_lane;
  if (l.st == nullptr || l.busy) return;
  if (l.skipped != 0) {
    l.st->batches += l.skipped;
    l.st->handouts.skipped(l.skipped);
    l.st->last_handout = l.last_ns;
  }
  l.left = 0;
  l.skipped = 0;
  l.last_ns = 0;
}

/// Before anything reads or counts `st`'s hand-outs.
inline void lane_fold_for(IterState* st) noexcept {
  if (g_lane.st == st) lane_fold();
}

/// Folds and lets go of the iterator (it died, a new lane opens, or the states are forgotten).
void lane_close() {
  lane_fold();
  Lane& l = g_lane;
  PyObject* st = reinterpret_cast<PyObject*>(l.st);
  PyObject* watch = l.watch;
  l = Lane{};
  Py_XDECREF(watch);  // after the lane is clear: a dealloc may run code
  Py_XDECREF(st);
}

PyObject* lane_closed(PyObject*, PyObject* ref) {
  if (g_lane.watch == ref) lane_close();
  Py_RETURN_NONE;
}

PyMethodDef lane_closer_def = {"lane_closed", lane_closed, METH_O,
                               "The lane's iterator died: close the lane."};

/// A run of `run` hand-outs of `it` (whose state `st` is folded) goes through the lane; false
/// when none opens (the next hand-out is then measured).
bool lane_open(PyObject* it, IterState* st, uint32_t run, int64_t now) {
  Lane& l = g_lane;
  if (l.busy) return false;
  if (l.it != it || l.st != st) {
    lane_close();
    PyObject* watch = PyWeakref_NewRef(it, g_lane_closer);
    if (watch == nullptr) {
      PyErr_Clear();
      return false;
    }
    Py_INCREF(st);
    l.it = it;
    l.st = st;
    l.watch = watch;
  }
  l.left = run;
  l.skipped = 0;
  l.since = now;
  l.last_ns = 0;
  return true;
}

/// How both _next_data hooks end a hand-out of `data` at `now_ns`: they let go of the state
/// they held, then read CUDA memory when due (a BaseException there: the batch is dropped).
PyObject* handed_out(IterState* st, PyObject* data, int64_t now_ns) {
  const int loader = st->loader_id;
  Py_DECREF(st);
  if (!maybe_cuda_memory(now_ns, loader)) {
    Py_DECREF(data);
    return nullptr;
  }
  return data;
}

/// After a hand-out at `coarse`: whether the next one is measured, and this one's time, on the
/// precise clock when it is (the next event's step is timed from it). Lets go of `st`.
PyObject* decide_next(IterState* st, PyObject* data, int64_t coarse) {
  st->measure_next = st->handouts.decide(coarse);
  st->last_handout = st->measure_next ? now_ns() : coarse;
  return handed_out(st, data, coarse);
}

/// What follows a hand-out of `data` by a single-process iterator: the decision on the next
/// one, which is then timed from now on the precise clock.
/// `it`: the hand-out was measured and its batch not pinned, so the next ones may go through
/// the lane (a pinned batch's time waits in PINS for its hand-out to take it).
PyObject* single_handed_out(IterState* st, PyObject* data, PyObject* it = nullptr) {
  ++st->batches;
  const int64_t coarse = coarse_now_ns();
  if (it != nullptr) {
    const int64_t now = now_ns();
    const uint32_t run = st->handouts.plan(now);
    st->measure_next = 1;  // after the run, if one opens
    if (run > 0 && lane_open(it, st, run, coarse)) {
      st->last_handout = 0;  // the run's last one sets it (unknown if the run is cut short)
      return handed_out(st, data, coarse);
    }
    st->last_handout = now;
    return handed_out(st, data, coarse);
  }
  return decide_next(st, data, coarse);
}

/// A single-process `_next_data` raised (the exception is pending): a fetch's exception is
/// told to dldoctor.job first (it finds the fetch's indices in the traceback; a sampler's or
/// pin_memory's exception is no fetch's), then the state learns why, as for any hand-out.
/// `t0`: when the call began (measured), else now. Lets go of `st`.
PyObject* single_failed(PyObject* it, IterState* st, int64_t t0) {
  PendingError err;
  err.take();
  bool go_on = true;
  if (err.is(PyExc_Exception) && !err.is(PyExc_StopIteration))
    go_on = call_back(g->on_fetch_error, "OiiLLO", err.value ? err.value : Py_None,
                      st->loader_id, -1, st->batches, (long long)(t0 ? t0 : now_ns()), Py_None);
  if (!go_on) {
    err.drop();
    Py_DECREF(st);
    return nullptr;
  }
  err.restore();
  next_failed(it, st);
  Py_DECREF(st);
  return nullptr;
}

/// Most hand-outs of a fast loop: not measured, nothing but the original runs; the sample
/// counts the hand-out.
PyObject* single_unmeasured(HotMethod* m, IterState* st, PyObject* const* args, size_t nargsf,
                            PyObject* kw) {
  Py_INCREF(st);  // the iterator may drop its state while the fetch runs
  PyObject* data = call_orig(m, args, nargsf, kw);
  if (data == nullptr) return single_failed(args[0], st, 0);
  pop_pin_ns(data);
  st->handouts.record(false, false, st->last_handout);
  return single_handed_out(st, data);
}

/// A hand-out of the lane's run. Every kLaneClockEvery-th reads the coarse clock: a loop that
/// slows down ends its run within kMaxUnmeasuredNs, as decide() would.
PyObject* lane_next(HotMethod* m, PyObject* const* args, size_t nargsf) {
  constexpr uint32_t kLaneClockEvery = 16;
  Lane& l = g_lane;
  PyObject* it = args[0];
  --l.left;
  ++l.skipped;
  l.busy = 1;
  PyObject* data = PyObject_Vectorcall(m->orig, args, nargsf, nullptr);
  l.busy = 0;
  if (l.it != it) return data;  // the lane closed meanwhile (states forgotten)
  if (data == nullptr) {        // no batch came: the state learns why
    --l.skipped;
    IterState* st = l.st;
    Py_INCREF(st);
    lane_fold();
    return single_failed(it, st, 0);
  }
  if (l.left == 0) {
    l.last_ns = now_ns();
  } else if (l.skipped % kLaneClockEvery == 0 &&
             coarse_now_ns() - l.since >= trace::kMaxUnmeasuredNs) {
    l.left = 0;  // the next hand-out is measured
    l.last_ns = now_ns();
  }
  return data;
}

/// A single-process hand-out: the iterator fetches the batch itself, in this call (next
/// index, fetch, pin), so a measured one is both the batch's fetch (kWorkerBatch of worker -1,
/// timed without the pinning) and its hand-out (kMainBatch). Its slow fetches are not looked
/// for: straggler_worker, the only rule that names them, needs two workers.
PyObject* single_next_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kw) {
  auto* m = reinterpret_cast<HotMethod*>(self);
  if (Lane& l = g_lane; PyVectorcall_NARGS(nargsf) == 1 && args[0] == l.it && l.left != 0 &&
                        !l.busy && kw == nullptr)
    return lane_next(m, args, nargsf);
  IterState* st = next_state(args, nargsf, kw);
  if (st != nullptr) lane_fold_for(st);
  if (st == nullptr) return call_orig(m, args, nargsf, kw);
  // An epoch's first hand-out is always measured (its wait is the workers' start-up); the
  // others as decided at the previous hand-out, when its time was read precisely if needed.
  const bool first = st->batches == 0;
  if (!first && !st->measure_next) return single_unmeasured(m, st, args, nargsf, kw);
  PyObject* it = args[0];
  BatchContext& c = *g;
  FetchStream& s = *st->stream;
  trace::BatchSampler& handouts = st->handouts;
  const int loader = st->loader_id;
  const long long idx = st->batches;
  // The batch stands for itself and the unmeasured hand-outs before it (what record() below
  // makes the sampler's weight), in both its events.
  const uint32_t weight = first ? 1 : handouts.unmeasured() + 1;
  Py_INCREF(st);  // the iterator may drop its state while the fetch runs
  PyObject* profiler = nullptr;
  if (!maybe_profile(c, loader, &profiler)) {
    Py_DECREF(st);
    return nullptr;
  }
  const bool detail = wants_detail(s);
  c.collate_ns = 0;
  c.collate_samples = 0;
  CollateSwap collate;
  if (PyObject* fetcher = PyObject_GetAttr(it, g_str_dataset_fetcher)) {
    collate.install(fetcher);
    Py_DECREF(fetcher);
  } else {
    PyErr_Clear();
  }
  const int64_t c0 = detail ? thread_cpu_ns() : 0;
  const int64_t t0 = now_ns();
  PyObject* data = call_orig(m, args, nargsf, kw);
  const int64_t t1 = now_ns();
  const int64_t c1 = detail ? thread_cpu_ns() : -1;
  if (data == nullptr) {
    PendingError err;
    err.take();
    collate.restore();
    const bool go_on = finish_profile(c, profiler, loader, -1, idx, -1);
    if (!go_on) {
      err.drop();
      Py_DECREF(st);
      return nullptr;
    }
    err.restore();
    return single_failed(it, st, t0);
  }
  collate.restore();
  const long long pin = pop_pin_ns(data);
  const int64_t d = t1 - t0 - (pin > 0 ? pin : 0);
  s.last_fetch_ns = d;
  ++s.fetches;
  ++s.measured;
  const bool profiled = profiler != nullptr;
  bool go_on = finish_profile(c, profiler, loader, -1, idx, d);
  const long long bytes = detail_bytes(c, detail, data, &go_on);
  const long long samples = c.collate_samples ? c.collate_samples : 1;
  writer_emit(int64_t(EventKind::kWorkerBatch), loader, -1, idx, samples, t0, d, c.collate_ns,
              detail ? c1 - c0 : -1, bytes, profiled ? trace::kProfiled : 0, weight);
  if (!go_on) {
    Py_DECREF(data);
    Py_DECREF(st);
    return nullptr;
  }
  if (!first) handouts.record(true, false, st->last_handout);
  const long long last = st->last_handout;
  writer_emit(int64_t(EventKind::kMainBatch), loader, -1, idx, c.collate_samples, t0, t1 - t0,
              last ? t0 - last : -1, pin, 0, 0, weight);
  return single_handed_out(st, data, pin < 0 ? it : nullptr);
}

/// The batch an iterator with workers hands out next (its _rcvd_idx); -1 when unknown.
long long next_due(PyObject* it) {
  PyObject* r = PyObject_GetAttr(it, g_str_rcvd_idx);
  if (r == nullptr) {
    PyErr_Clear();
    return -1;
  }
  const long long due = PyLong_Check(r) ? as_ll(r, -1) : -1;
  Py_DECREF(r);
  return due;
}

/// What follows a hand-out of `data` by an iterator with workers: the next batch due into the
/// ring's progress table (what a stuck loop waits for, exact whether or not this one was
/// measured), then the decision on the next one, timed from now on the precise clock if so.
PyObject* multi_handed_out(IterState* st, PyObject* data, long long due) {
  ++st->batches;
  writer_progress(st->loader_id, st->epoch, due);
  return decide_next(st, data, coarse_now_ns());
}

/// Most hand-outs of a fast loader with workers: nothing but the original runs (_get_data,
/// not told of it, records nothing); the sample counts the hand-out.
PyObject* multi_unmeasured(HotMethod* m, IterState* st, PyObject* const* args, size_t nargsf,
                           PyObject* kw) {
  PyObject* it = args[0];
  Py_INCREF(st);  // the iterator may drop its state while the call runs
  const char prev_in_next = st->in_next;
  st->in_next = 1;
  PyObject* data = call_orig(m, args, nargsf, kw);
  st->in_next = prev_in_next;
  if (data == nullptr) {
    next_failed(it, st);
    Py_DECREF(st);
    return nullptr;
  }
  pop_pin_ns(data);
  st->handouts.record(false, false, st->last_handout);
  return multi_handed_out(st, data, next_due(it));
}

/// A hand-out by an iterator with workers: the batch comes from a worker's queue (or was
/// already waiting), so its event is the consumer's side alone: how long it waited
/// (_get_data's time), since the previous hand-out, and which batch of which worker. A fast
/// loader's are a sample (kMultiHandoutsSampleAbovePerSecond); an epoch's first is always
/// measured (its wait is the workers' start-up).
PyObject* multi_next_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kw) {
  auto* m = reinterpret_cast<HotMethod*>(self);
  IterState* st = next_state(args, nargsf, kw);
  if (st == nullptr) return call_orig(m, args, nargsf, kw);
  const bool first = st->batches == 0;
  if (!first && !st->measure_next) return multi_unmeasured(m, st, args, nargsf, kw);
  PyObject* it = args[0];
  BatchContext& c = *g;
  // The batch stands for itself and the unmeasured hand-outs before it.
  const uint32_t weight = first ? 1 : st->handouts.unmeasured() + 1;
  const int64_t t0 = now_ns();
  // The batch due next, and whether it arrived early and already waits (stashed in
  // _task_info with its data): then its worker is known before the call.
  long long rcvd = -1, stashed = -1;
  bool rcvd_known = false;
  PyObject* task_info = PyObject_GetAttr(it, g_str_task_info);
  if (task_info == nullptr) PyErr_Clear();
  if (PyObject* r = PyObject_GetAttr(it, g_str_rcvd_idx)) {
    rcvd = as_ll(r, -1);
    rcvd_known = PyLong_Check(r);
    if (PyObject* info = dict_get(task_info, r)) {
      if (PyTuple_Check(info) && PyTuple_GET_SIZE(info) == 2)
        stashed = as_ll(PyTuple_GET_ITEM(info, 0), -1);
      Py_DECREF(info);
    }
    Py_DECREF(r);
  } else {
    PyErr_Clear();
  }
  Py_XDECREF(task_info);
  st->wait_ns = 0;
  st->got_idx = -1;
  Py_INCREF(st);
  PyObject* prev_it = c.current_it;
  IterState* prev_st = c.current_st;
  const char prev_in_next = st->in_next;
  c.current_it = it;
  c.current_st = st;
  st->in_next = 1;
  PyObject* data = call_orig(m, args, nargsf, kw);
  c.current_it = prev_it;
  c.current_st = prev_st;
  st->in_next = prev_in_next;
  if (data == nullptr) {
    next_failed(it, st);
    Py_DECREF(st);
    return nullptr;
  }
  long long idx = st->got_idx, worker = st->got_worker;
  const long long due = rcvd_known ? next_due(it) : -1;
  if (due >= 0 && due != rcvd) {
    // In order: the batch handed out is the one just before the new receive index,
    // either just received or already waiting (stashed) when we were called.
    idx = due - 1;
    worker = st->got_idx == idx ? st->got_worker : (idx == rcvd ? stashed : -1);
  }
  if (!first) st->handouts.record(true, false, st->last_handout);
  const long long last = st->last_handout;
  writer_emit(int64_t(EventKind::kMainBatch), st->loader_id, worker, idx, 0, t0,
              c.wait_hooked ? st->wait_ns : -1, last ? t0 - last : -1, pop_pin_ns(data), 0, 0,
              weight);
  return multi_handed_out(st, data, due);
}

PyObject* get_data_call(PyObject* self, PyObject* const* args, size_t nargsf, PyObject* kw) {
  auto* m = reinterpret_cast<HotMethod*>(self);
  if (PyVectorcall_NARGS(nargsf) != 1 || kw != nullptr) return call_orig(m, args, nargsf, kw);
  PyObject* it = args[0];
  const int64_t t = now_ns();
  PyObject* r = call_orig(m, args, nargsf, kw);
  if (r == nullptr) {
    PendingError err;
    err.take();
    bool go_on = true;
    if (err.is(PyExc_RuntimeError))  // a dead worker: record it, raise the same error
      go_on = call_back(g->on_get_data_error, "OO", it, err.value ? err.value : Py_None);
    if (!go_on) {
      err.drop();
      return nullptr;
    }
    err.restore();
    return nullptr;
  }
  IterState* st = g->current_st;
  if (st != nullptr && g->current_it == it) {  // called from this iterator's _next_data
    st->wait_ns += now_ns() - t;
    if (PyTuple_CheckExact(r) && PyTuple_GET_SIZE(r) == 2) {
      PyObject* idx = PyTuple_GET_ITEM(r, 0);
      st->got_idx = as_ll(idx, -1);
      st->got_worker = -1;
      PyObject* task_info = PyObject_GetAttr(it, g_str_task_info);  // before _next_data pops it
      if (task_info == nullptr) PyErr_Clear();
      if (PyObject* info = dict_get(task_info, idx)) {
        if (PyTuple_Check(info) && PyTuple_GET_SIZE(info) >= 1)
          st->got_worker = int(as_ll(PyTuple_GET_ITEM(info, 0), -1));
        Py_DECREF(info);
      }
      Py_XDECREF(task_info);
    }
  }
  return r;
}

// -- The types' references ----------------------------------------------------------------------
inline void clear_ref(PyObject*& ref) { Py_CLEAR(ref); }

/// The GC slots of a type of ours from the object references it holds (`Refs`): traverse
/// visits its type and each, clear drops each, dealloc clears, lets `Release` free what
/// else the object owns, and frees it.
template <class T, PyObject* T::*... Refs>
struct GcRefs {
  static int traverse(PyObject* self, visitproc visit, void* arg) {
    Py_VISIT(Py_TYPE(self));
    T* o = reinterpret_cast<T*>(self);
    for (PyObject* ref : {o->*Refs...}) Py_VISIT(ref);
    return 0;
  }
  static int clear(PyObject* self) {
    T* o = reinterpret_cast<T*>(self);
    (clear_ref(o->*Refs), ...);
    return 0;
  }
  template <void (*Release)(T*) = nullptr>
  static void dealloc(PyObject* self) {
    PyTypeObject* tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    clear(self);
    if constexpr (Release != nullptr) Release(reinterpret_cast<T*>(self));
    tp->tp_free(self);
    Py_DECREF(tp);
  }
};

// -- The HotMethod type --------------------------------------------------------------------------
constexpr vectorcallfunc kCalls[] = {fetch_call,       collate_call,    index_get_call,
                                     single_next_call, multi_next_call, get_data_call};

PyObject* new_hot(Role role, PyObject* orig) {
  auto* m = PyObject_GC_New(HotMethod, g_hot_type);
  if (m == nullptr) return nullptr;
  m->vectorcall = kCalls[int(role)];
  Py_INCREF(orig);
  m->orig = orig;
  m->dict = nullptr;
  m->role = role;
  m->role_name = g_role_names[int(role)];
  Py_INCREF(m->role_name);
  PyObject_GC_Track(m);
  return reinterpret_cast<PyObject*>(m);
}

using HotRefs = GcRefs<HotMethod, &HotMethod::orig, &HotMethod::dict, &HotMethod::role_name>;

PyObject* hot_descr_get(PyObject* self, PyObject* obj, PyObject*) {
  if (obj == nullptr || obj == Py_None) {
    Py_INCREF(self);
    return self;
  }
  return PyMethod_New(self, obj);
}

PyObject* hot_repr(PyObject* self) {
  auto* m = reinterpret_cast<HotMethod*>(self);
  return PyUnicode_FromFormat("<dldoctor %s hook of %R>", kRoleNames[int(m->role)],
                              m->orig ? m->orig : Py_None);
}

PyGetSetDef hot_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, nullptr, nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyMemberDef hot_members[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(HotMethod, vectorcall), READONLY, nullptr},
    {"__dictoffset__", T_PYSSIZET, offsetof(HotMethod, dict), READONLY, nullptr},
    {"original", T_OBJECT, offsetof(HotMethod, orig), READONLY,
     "The callable this hook stands in for."},
    {"role", T_OBJECT, offsetof(HotMethod, role_name), READONLY,
     "Which hook: fetch, collate, index_get, single_next, multi_next or get_data."},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot hot_slots[] = {
    {Py_tp_dealloc, reinterpret_cast<void*>(HotRefs::dealloc<>)},
    {Py_tp_traverse, reinterpret_cast<void*>(HotRefs::traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(HotRefs::clear)},
    {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
    {Py_tp_descr_get, reinterpret_cast<void*>(hot_descr_get)},
    {Py_tp_repr, reinterpret_cast<void*>(hot_repr)},
    {Py_tp_getset, hot_getset},
    {Py_tp_members, hot_members},
    {Py_tp_doc, const_cast<char*>("A dldoctor hook standing in for a torch method: calls the "
                                  "original with the same arguments and records the batch.")},
    {0, nullptr},
};

// Immutable: the interpreter specializes `self._next_data()` and `fetcher.fetch(i)` on a
// method descriptor only when its type is (CPython 3.11+); else each call is a generic
// lookup that also searches the instance's attributes.
#ifdef Py_TPFLAGS_IMMUTABLETYPE
constexpr unsigned long kHotImmutable = Py_TPFLAGS_IMMUTABLETYPE;
#else
constexpr unsigned long kHotImmutable = 0;
#endif
PyType_Spec hot_spec = {"dldoctor._ext.HotMethod", sizeof(HotMethod), 0,
                        Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL |
                            Py_TPFLAGS_METHOD_DESCRIPTOR | kHotImmutable,
                        hot_slots};

// -- The IterState type ---------------------------------------------------------------------------
PyObject* iter_new(PyTypeObject* tp, PyObject* args, PyObject* kwds) {
  static const char* kw[] = {"loader_id", "multiprocess", nullptr};
  int loader_id = 0, multiprocess = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwds, "ip", const_cast<char**>(kw), &loader_id,
                                   &multiprocess))
    return nullptr;
  auto* st = reinterpret_cast<IterState*>(tp->tp_alloc(tp, 0));
  if (st == nullptr) return nullptr;
  st->stream = new (std::nothrow) FetchStream();
  // trivially destructible: no delete
  new (&st->handouts) trace::BatchSampler(
      0, kHandoutsMeasuredPerSecond,
      multiprocess ? kMultiHandoutsSampleAbovePerSecond : trace::kSampleAbovePerSecond);
  st->died = PySet_New(nullptr);
  if (st->stream == nullptr || st->died == nullptr) {
    Py_DECREF(st);
    return PyErr_NoMemory();
  }
  st->loader_id = loader_id;
  st->multiprocess = char(multiprocess);
  if (auto it = g_loader_samplers->find(loader_id);
      !multiprocess && it != g_loader_samplers->end())
    st->handouts = it->second;  // its tail was taken when that epoch ended
  st->pid = int(::getpid());
  st->got_idx = -1;
  st->got_worker = -1;
  Py_INCREF(Py_None);
  st->ref = Py_None;
  return reinterpret_cast<PyObject*>(st);
}

using IterRefs = GcRefs<IterState, &IterState::died, &IterState::ref>;

void iter_release(IterState* st) {
  delete st->stream;
  st->stream = nullptr;
}

PyObject* iter_take_unmeasured(PyObject* self, PyObject*) {
  auto* st = reinterpret_cast<IterState*>(self);
  lane_fold_for(st);
  // A single-process fetch follows its hand-out's sample: the same tail for both. The
  // fetches of a loader with workers are theirs to count (kWorkerExit).
  const unsigned long tail = st->handouts.take_unmeasured();
  PyObject* tails = Py_BuildValue("(kk)", st->multiprocess ? 0ul : tail, tail);
  if (!st->multiprocess && st->batches > 0) {  // the epoch ends: its next one goes on from here
    if (g_loader_samplers->size() >= kMaxRememberedLoaders) g_loader_samplers->clear();
    (*g_loader_samplers)[st->loader_id] = st->handouts;
  }
  return tails;
}

PyMethodDef iter_methods[] = {
    {"take_unmeasured", iter_take_unmeasured, METH_NOARGS,
     "(fetches, hand-outs) of this single-process iterator that no event stands for: the "
     "tail of a sample, taken once when the epoch ends."},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef iter_members[] = {
    {"loader_id", T_INT, offsetof(IterState, loader_id), 0, nullptr},
    {"multiprocess", T_BOOL, offsetof(IterState, multiprocess), 0, nullptr},
    {"ended", T_BOOL, offsetof(IterState, ended), 0, nullptr},
    {"in_next", T_BOOL, offsetof(IterState, in_next), 0, "its _next_data is running"},
    {"pid", T_INT, offsetof(IterState, pid), 0, "the process that created it"},
    {"epoch", T_LONGLONG, offsetof(IterState, epoch), 0, nullptr},
    {"last_handout", T_LONGLONG, offsetof(IterState, last_handout), 0, nullptr},
    {"wait_ns", T_LONGLONG, offsetof(IterState, wait_ns), 0, nullptr},
    {"got_idx", T_LONGLONG, offsetof(IterState, got_idx), 0, nullptr},
    {"got_worker", T_INT, offsetof(IterState, got_worker), 0, nullptr},
    {"died", T_OBJECT_EX, offsetof(IterState, died), 0, "worker ids reported dead"},
    {"ref", T_OBJECT_EX, offsetof(IterState, ref), 0, "weakref to the iterator"},
    {nullptr, 0, 0, 0, nullptr},
};

// What the lane counts is in `batches` once read (or set).
PyObject* iter_get_batches(PyObject* self, void*) {
  auto* st = reinterpret_cast<IterState*>(self);
  lane_fold_for(st);
  return PyLong_FromLongLong(st->batches);
}

int iter_set_batches(PyObject* self, PyObject* value, void*) {
  auto* st = reinterpret_cast<IterState*>(self);
  if (value == nullptr) {
    PyErr_SetString(PyExc_TypeError, "cannot delete batches");
    return -1;
  }
  const long long n = PyLong_AsLongLong(value);
  if (n == -1 && PyErr_Occurred()) return -1;
  lane_fold_for(st);
  st->batches = n;
  return 0;
}

PyGetSetDef iter_getset[] = {
    {"batches", iter_get_batches, iter_set_batches, "handed out this epoch", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

PyType_Slot iter_slots[] = {
    {Py_tp_new, reinterpret_cast<void*>(iter_new)},
    {Py_tp_dealloc, reinterpret_cast<void*>(IterRefs::dealloc<iter_release>)},
    {Py_tp_traverse, reinterpret_cast<void*>(IterRefs::traverse)},
    {Py_tp_clear, reinterpret_cast<void*>(IterRefs::clear)},
    {Py_tp_members, iter_members},
    {Py_tp_getset, iter_getset},
    {Py_tp_methods, iter_methods},
    {Py_tp_doc, const_cast<char*>("IterState(loader_id, multiprocess): a main-process "
                                  "iterator's state, read by the batch hooks.")},
    {0, nullptr},
};

PyType_Spec iter_spec = {"dldoctor._ext.IterState", sizeof(IterState), 0,
                         Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC, iter_slots};

// -- The BatchContext type (one instance) --------------------------------------------------------
/// The names configure() takes, and where each is kept.
struct CallbackSlot {
  const char* name;
  PyObject* BatchContext::*member;
};
constexpr CallbackSlot kCallbackSlots[] = {
    {"iters", &BatchContext::iters},
    {"pin_ns", &BatchContext::pin_ns},
    {"batch_bytes", &BatchContext::on_batch_bytes},
    {"fetch_error", &BatchContext::on_fetch_error},
    {"slow_fetch", &BatchContext::on_slow_fetch},
    {"frame_index", &BatchContext::on_frame_index},
    {"profile_start", &BatchContext::on_profile_start},
    {"profile_finish", &BatchContext::on_profile_finish},
    {"next_error", &BatchContext::on_next_error},
    {"get_data_error", &BatchContext::on_get_data_error},
    {"cuda_memory", &BatchContext::on_cuda_memory},
};

PyObject** callback_slot(BatchContext* c, const char* name) {
  for (const CallbackSlot& s : kCallbackSlots)
    if (std::strcmp(s.name, name) == 0) return &(c->*s.member);
  return nullptr;
}

PyObject* ctx_configure(PyObject* self, PyObject* args, PyObject* kwds) {
  auto* c = reinterpret_cast<BatchContext*>(self);
  if (PyTuple_GET_SIZE(args) != 0) {
    PyErr_SetString(PyExc_TypeError, "configure() takes keyword arguments only");
    return nullptr;
  }
  PyObject *key, *value;
  Py_ssize_t pos = 0;
  while (kwds != nullptr && PyDict_Next(kwds, &pos, &key, &value)) {
    const char* name = PyUnicode_AsUTF8(key);
    PyObject** slot = name ? callback_slot(c, name) : nullptr;
    if (slot == nullptr) {
      PyErr_Format(PyExc_TypeError, "configure(): unknown hook %R", key);
      return nullptr;
    }
    Py_XINCREF(value == Py_None ? nullptr : value);
    PyObject* old = *slot;
    *slot = value == Py_None ? nullptr : value;
    Py_XDECREF(old);
  }
  Py_RETURN_NONE;
}

PyObject* ctx_reset(PyObject* self, PyObject*) {
  auto* c = reinterpret_cast<BatchContext*>(self);
  for (const CallbackSlot& s : kCallbackSlots) Py_CLEAR(c->*s.member);
  c->loader = 0;
  c->worker = -1;
  c->index = -1;
  c->current_it = nullptr;
  c->current_st = nullptr;
  c->wait_hooked = 0;
  Py_CLEAR(c->cached_st);
  lane_close();
  Py_RETURN_NONE;
}

PyObject* ctx_forget_states(PyObject* self, PyObject*) {
  auto* c = reinterpret_cast<BatchContext*>(self);
  Py_CLEAR(c->cached_st);
  c->current_it = nullptr;
  c->current_st = nullptr;
  lane_close();
  Py_RETURN_NONE;
}

PyObject* ctx_begin_worker(PyObject* self, PyObject* args) {
  auto* c = reinterpret_cast<BatchContext*>(self);
  int loader = 0, worker = -1;
  if (!PyArg_ParseTuple(args, "ii", &loader, &worker)) return nullptr;
  c->loader = loader;
  c->worker = worker;
  c->index = -1;
  c->epoch = 1;
  c->index_from_frame = 0;
  c->worker_started = 1;
  c->process_fetches = 0;
  c->worker_stream->reset();  // forked: the parent's counts are not this worker's
  c->epoch_fetches0 = 0;
  Py_RETURN_NONE;
}

PyObject* ctx_take_unmeasured(PyObject* self, PyObject*) {
  auto* c = reinterpret_cast<BatchContext*>(self);
  return PyLong_FromUnsignedLong(c->worker_stream->sampler.take_unmeasured());
}

PyObject* ctx_worker_fetches(PyObject* self, PyObject*) {
  FetchStream* s = reinterpret_cast<BatchContext*>(self)->worker_stream;
  return PyLong_FromUnsignedLongLong(s->fetches);
}

PyObject* ctx_sample_period(PyObject* self, PyObject*) {
  return PyLong_FromUnsignedLong(
      reinterpret_cast<BatchContext*>(self)->worker_stream->sampler.period());
}

PyMethodDef ctx_methods[] = {
    {"configure", reinterpret_cast<PyCFunction>(reinterpret_cast<void*>(ctx_configure)),
     METH_VARARGS | METH_KEYWORDS,
     "configure(**hooks): the dicts and callbacks of dldoctor.job the hooks use (None "
     "unsets one)."},
    {"reset", ctx_reset, METH_NOARGS, "Stop attributing fetches and drop every callback."},
    {"forget_states", ctx_forget_states, METH_NOARGS,
     "The iterator states were dropped from the registry (after fork): forget any kept."},
    {"begin_worker", ctx_begin_worker, METH_VARARGS,
     "begin_worker(loader, worker): this process is that worker; its fetch counts start "
     "over."},
    {"take_unmeasured", ctx_take_unmeasured, METH_NOARGS,
     "This worker's fetches no event stands for (a sample's tail); then 0."},
    {"worker_fetches", ctx_worker_fetches, METH_NOARGS, "Fetches this worker returned."},
    {"sample_period", ctx_sample_period, METH_NOARGS,
     "About one fetch in this many of this worker is measured (1: all)."},
    {nullptr, nullptr, 0, nullptr},
};

PyMemberDef ctx_members[] = {
    {"loader", T_INT, offsetof(BatchContext, loader), 0, "0: fetches not watched"},
    {"worker", T_INT, offsetof(BatchContext, worker), 0, "-1: the main process"},
    {"index", T_LONGLONG, offsetof(BatchContext, index), 0, "batch index (-1 unknown)"},
    {"epoch", T_LONGLONG, offsetof(BatchContext, epoch), 0, "a worker's epoch (0 unknown)"},
    {"index_from_frame", T_BOOL, offsetof(BatchContext, index_from_frame), 0, nullptr},
    {"wait_hooked", T_BOOL, offsetof(BatchContext, wait_hooked), 0, nullptr},
    {"worker_started", T_BOOL, offsetof(BatchContext, worker_started), 0, nullptr},
    {"process_fetches", T_ULONGLONG, offsetof(BatchContext, process_fetches), 0, nullptr},
    {"cuda_next_ns", T_LONGLONG, offsetof(BatchContext, cuda_next_ns), 0, nullptr},
    {nullptr, 0, 0, 0, nullptr},
};

PyType_Slot ctx_slots[] = {
    {Py_tp_members, ctx_members},
    {Py_tp_methods, ctx_methods},
    {Py_tp_doc, const_cast<char*>("This process's batch-hook context (one instance: "
                                  "_ext.batch_context).")},
    {0, nullptr},
};

PyType_Spec ctx_spec = {"dldoctor._ext.BatchContext", sizeof(BatchContext), 0, Py_TPFLAGS_DEFAULT,
                        ctx_slots};

PyObject* make_type(PyType_Spec* spec) {
  PyObject* t = PyType_FromSpec(spec);
  if (t == nullptr) throw nb::python_error();
  return t;
}

}  // namespace

void register_batch_hooks(nb::module_& m) {
  g_hot_type = reinterpret_cast<PyTypeObject*>(make_type(&hot_spec));
  g_iter_type = reinterpret_cast<PyTypeObject*>(make_type(&iter_spec));
  auto* ctx_type = reinterpret_cast<PyTypeObject*>(make_type(&ctx_spec));
  g_str_collate_fn = PyUnicode_InternFromString("collate_fn");
  g_str_auto_collation = PyUnicode_InternFromString("auto_collation");
  g_str_dataset_fetcher = PyUnicode_InternFromString("_dataset_fetcher");
  g_str_rcvd_idx = PyUnicode_InternFromString("_rcvd_idx");
  g_str_task_info = PyUnicode_InternFromString("_task_info");
  g_str_get = PyUnicode_InternFromString("get");
  for (size_t i = 0; i < std::size(kRoleNames); ++i)
    g_role_names[i] = PyUnicode_InternFromString(kRoleNames[i]);
  g = PyObject_New(BatchContext, ctx_type);
  if (g == nullptr) throw nb::python_error();
  std::memset(reinterpret_cast<char*>(g) + sizeof(PyObject), 0,
              sizeof(BatchContext) - sizeof(PyObject));
  g->worker = -1;
  g->index = -1;
  g->worker_stream = new FetchStream();
  g_loader_samplers = new std::unordered_map<int, trace::BatchSampler>();
  g_lane_closer = PyCFunction_New(&lane_closer_def, nullptr);
  if (g_lane_closer == nullptr) throw nb::python_error();

  // Types and the context live as long as the process (the module is never unloaded).
  m.attr("HotMethod") = nb::borrow(reinterpret_cast<PyObject*>(g_hot_type));
  m.attr("IterState") = nb::borrow(reinterpret_cast<PyObject*>(g_iter_type));
  m.attr("BatchContext") = nb::borrow(reinterpret_cast<PyObject*>(ctx_type));
  m.attr("batch_context") = nb::borrow(reinterpret_cast<PyObject*>(g));
  m.def(
      "hot_method",
      [](const std::string& role, nb::object orig) {
        for (int i = 0; i < int(std::size(kRoleNames)); ++i)
          if (role == kRoleNames[i]) return nb::steal(new_hot(Role(i), orig.ptr()));
        throw nb::value_error(("unknown hook role: " + role).c_str());
      },
      nb::arg("role"), nb::arg("original"),
      "A HotMethod standing in for `original`: role is one of fetch, collate, index_get, "
      "single_next, multi_next, get_data.");
  m.def(
      "batch_hook_constants",
      []() {
        nb::dict d;
        d["profile_every"] = kProfileEvery;
        d["profile_first"] = kProfileFirst;
        d["profile_min_interval_ns"] = kProfileMinIntervalNs;
        d["profile_max_interval_ns"] = kProfileMaxIntervalNs;
        d["detail_always_ns"] = kDetailAlwaysNs;
        d["detail_every"] = kDetailEvery;
        d["cuda_memory_every_ns"] = kCudaMemoryEveryNs;
        d["measured_per_second"] = trace::kMeasuredPerSecond;
        d["handouts_measured_per_second"] = kHandoutsMeasuredPerSecond;
        d["sample_above_per_second"] = trace::kSampleAbovePerSecond;
        d["multi_handouts_sample_above_per_second"] = kMultiHandoutsSampleAbovePerSecond;
        d["max_unmeasured_ns"] = trace::kMaxUnmeasuredNs;
        d["slow_fetch_factor"] = trace::kSlowFetchFactor;
        d["slow_fetch_min_ns"] = trace::kSlowFetchMinNs;
        d["slow_fetch_max_records"] = trace::kSlowFetchMaxRecords;
        return d;
      },
      "The batch hooks' schedule: profile candidates, detail sampling, batch sampling.");
}

}  // namespace dldoctor::ext
