// loader_error: the loader raised to the training loop an exception that the dataset's
// `__getitem__` / `__getitems__` / `__iter__` or the collate_fn raised, in a worker (torch
// re-raises it in the main process as "Caught <Type> in DataLoader worker process <N>") or in
// the main process itself (num_workers=0). Proved by the fetch hook's record of the exception
// (its batch, sample indices and traceback) matched to the loader's own error, or by the
// worker's traceback inside torch's re-raised text when the hook saw none (an exception in
// the worker's start-up: iter(dataset), worker_init_fn).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "dldoctor_core/analyze/code_owner.hpp"
#include "dldoctor_core/analyze/view.hpp"
#include "dldoctor_core/report/finding.hpp"

namespace dldoctor::analyze::loader_error {

/// Sample indices shown in the evidence and the fix: enough to find a bad sample in a batch,
/// short enough to read (the hooks keep ErrorNote::kMaxSamples).
inline constexpr size_t kShownSamples = 16;

/// One frame of a Python traceback.
struct Frame {
  std::string file;
  int line = 0;
  std::string function;
  std::string code;  ///< the source line under it ("" when the traceback has none)
};

/// The frames of the last traceback in `text` (the exception raised; a chained one's
/// context before it is skipped), oldest first.
std::vector<Frame> parse_traceback(std::string_view text);

/// A path as a reader wants it: an installed package's file as "package/module.py", others
/// as they are.
std::string short_path(std::string_view file);

/// "file:line in function".
std::string frame_text(const Frame& f);

struct Evidence {
  report::Rank rank;
  int loader = -1;
  int worker = -1;  ///< -1: the main process (num_workers=0) or unknown
  bool in_worker = false;
  int pid = 0;
  std::string type;     ///< e.g. "builtins.ValueError"
  std::string message;  ///< the exception's own text (first line, at most 300 characters)
  std::string stage;    ///< "__getitem__", "__getitems__", "__iter__", "collate_fn", ... or ""
  std::optional<Frame> raised_at;         ///< the deepest frame that is not torch's nor dldoctor's
  std::optional<Frame> user_frame;        ///< the deepest of the job's own, when raised_at is not
  std::vector<int64_t> samples;           ///< dataset indices of the failing batch (empty: unknown)
  bool iterable = false;                  ///< the loader's dataset is an IterableDataset
  int batch_index = -1;                   ///< the failing batch's index in its epoch, -1 unknown
  int64_t epoch = 0;                      ///< 0 unknown
  std::optional<int64_t> batches_before;  ///< batches the loop received before (whole run)
  std::optional<int64_t> dataset_length;  ///< len(dataset), when the hooks measured it
  int batch_size = 0;                     ///< the loader's, 0 unknown
  int64_t raised = 1;                     ///< times the loader raised it
  bool went_on = false;                   ///< the loop caught it and received batches after
};

/// One per loader: the first fetch exception it raised to the loop.
std::vector<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::loader_error
