// Where a process of a stuck job is: read from its Python stack (which loader stage its
// frames are in, what the top frame waits on) and its kernel state (D, futex, CPU use).
// The hang rules (collate_deadlock, worker_hang, worker_died, main_process_bound) all start
// from this reading, so they agree on what "stuck in collate" or "idle" means. The watchdog
// captures; this reads the capture.
#pragma once

#include <optional>
#include <string>

#include "dldoctor_core/watchdog/hang.hpp"
#include "dldoctor_core/watchdog/stack.hpp"

namespace dldoctor::analyze {

using watchdog::format_frame;
using watchdog::HangContext;
using watchdog::HangSnapshot;
using watchdog::kBusyCpuShare;
using watchdog::LoaderContext;
using watchdog::ProcessCapture;
using watchdog::PyFrame;

/// The stage a process is in.
enum class Place {
  kUnknown,        ///< no stack, and nothing else tells
  kGone,           ///< exited (no /proc entry) or a zombie
  kIdle,           ///< a worker waiting for its next index: not part of the problem
  kInLoader,       ///< the main process waiting inside the DataLoader for a batch
  kOutsideLoader,  ///< the main process somewhere else (the training loop)
  kShuttingDown,   ///< the main process ending an iterator: joining its workers
  kCollate,        ///< inside collate_fn (called from the fetcher)
  kGetitem,        ///< inside the dataset (__getitem__/__getitems__/__iter__) under fetch
  kWorkerInit,     ///< worker startup or worker_init_fn, before the fetch loop
  kSending,        ///< putting a finished batch on the result queue
  kOther,          ///< anywhere else in a worker
};

/// "collate", "getitem", "worker_init" ... (for evidence and tests).
const char* place_name(Place p) noexcept;

/// What a process's capture says.
struct ProcessReading {
  Place place = Place::kUnknown;
  int thread = -1;  ///< index of the stack read in ProcessCapture::stacks, -1 none
  /// The frame that shows the place: the collate function, the dataset's __getitem__, the
  /// worker_init_fn, the loader's __next__; index into that thread's frames.
  std::optional<size_t> place_frame;
  /// What the top of the stack waits on: "lock", "condition", "queue", "pipe", "futex",
  /// "thread join", "future", "manager"; "" when it does not wait on a synchronization object.
  std::string wait;
  std::optional<double> cpu_share;  ///< CPU share of one core over the stall, when known
  bool busy = false;                ///< cpu_share >= kBusyCpuShare
  bool io_wait = false;             ///< state D: uninterruptible sleep in the kernel

  /// The frame that shows the place, or nullptr.
  const PyFrame* frame(const ProcessCapture& p) const noexcept;
  /// The most recent frame of the thread read, or nullptr.
  const PyFrame* top(const ProcessCapture& p) const noexcept;
};

/// Reads one process; `loader` is its loader's context (nullptr when unknown).
ProcessReading read_process(const ProcessCapture& p, const LoaderContext* loader);

/// The loader a process works for: its own id for a worker; for the main process, the one
/// of its loaders that runs in-process (num_workers == 0) or its only loader; -1 when
/// ambiguous. A multi-rank job has a main process per rank, each with its own loaders.
int effective_loader(const ProcessCapture& p, const HangContext& context) noexcept;
/// Whether the main process `main_pid` iterates `l` (true when l's main process is unknown).
bool iterated_by(const LoaderContext& l, int main_pid) noexcept;

/// What a synchronization frame waits on ("lock", "queue" ...), or "" (exposed for tests).
std::string sync_wait_of(const PyFrame& f);

}  // namespace dldoctor::analyze
