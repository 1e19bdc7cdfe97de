// A loader error is the fetch's exception when the loader's error (kLoader) is the one the
// fetch raised (kWorker, same loader, same type or torch's "Caught <Type>" text), or when
// torch's text says it re-raises a worker's exception. Errors other rules own (no room in
// /dev/shm, no descriptor, no GPU memory) and errors that are no fetch's (a dead worker, a
// timeout) are not this rule's.
#include "dldoctor_core/analyze/rules/loader_error.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>

namespace dldoctor::analyze::loader_error {

namespace {

std::string_view trim(std::string_view s) noexcept {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\r' || s.back() == '\n'))
    s.remove_suffix(1);
  return s;
}

/// "builtins.ValueError" -> "ValueError"; "PIL.UnidentifiedImageError" -> the same after the
/// last dot.
std::string_view short_type(std::string_view type) noexcept {
  const size_t dot = type.rfind('.');
  return dot == std::string_view::npos ? type : type.substr(dot + 1);
}

/// "builtins.ValueError" -> "ValueError", "PIL.UnidentifiedImageError" as it is.
std::string shown_type(std::string_view type) {
  if (type.substr(0, 9) == "builtins.") return std::string(type.substr(9));
  return std::string(type);
}

/// The last line of `text` that reads "<Type>: <message>" for `type` (a traceback's end),
/// without the type; else the first non-empty line.
std::string message_line(std::string_view text, std::string_view type) {
  const std::string prefix = std::string(short_type(type)) + ":";
  std::string_view first, found;
  size_t pos = 0;
  while (pos <= text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    std::string_view line = trim(text.substr(pos, nl - pos));
    if (!line.empty() && first.empty()) first = line;
    if (!type.empty() && line.substr(0, prefix.size()) == prefix)
      found = trim(line.substr(prefix.size()));
    pos = nl + 1;
  }
  return std::string((found.empty() ? first : found).substr(0, 300));
}

/// torch's text for a worker's exception re-raised: "Caught <Type> in DataLoader worker
/// process <N>." (and the worker's traceback after "Original Traceback"). The worker id, or
/// nullopt when the text is not one.
std::optional<int> reraised_worker(std::string_view message) {
  constexpr std::string_view kIn = " in DataLoader worker process ";
  if (message.substr(0, 7) != "Caught ") return std::nullopt;
  const size_t at = message.find(kIn);
  if (at == std::string_view::npos) return std::nullopt;
  return std::atoi(std::string(message.substr(at + kIn.size(), 12)).c_str());
}

/// The traceback part of torch's re-raised text ("" when it has none).
std::string_view original_traceback(std::string_view message) {
  const size_t at = message.find("Original Traceback");
  return at == std::string_view::npos ? std::string_view() : message.substr(at);
}

/// The loader the fetch exception `w` was raised by raised it to the loop as `l`.
bool same_error(const ErrorNote& w, const ErrorNote& l) {
  if (w.loader != l.loader || (w.t_ns && l.t_ns && w.t_ns > l.t_ns)) return false;
  if (w.type == l.type) return true;
  // torch re-raises as RuntimeError when the exception type cannot be rebuilt from a text.
  return contains(l.message,
                  "Caught " + std::string(short_type(w.type)) + " in DataLoader worker");
}

/// The stage that raised, from the frames: the collate_fn when torch's fetch called it, else
/// the function of the first frame past torch's fetch (the dataset's method), else the
/// deepest frame's of the job's own code.
std::string stage_of(const std::vector<Frame>& frames) {
  for (size_t i = frames.size(); i-- > 0;) {
    const Frame& f = frames[i];
    if (owner_of(f.file) != Owner::kTorch || !contains(f.file, "_utils/fetch.py")) continue;
    if (contains(f.code, "collate_fn")) return "collate_fn";
    for (size_t j = i + 1; j < frames.size(); ++j)
      if (owner_of(frames[j].file) != Owner::kTorch) return frames[j].function;
    return "";
  }
  for (const Frame& f : frames)
    if (owner_of(f.file) == Owner::kTorch && contains(f.file, "_utils/worker.py") &&
        contains(f.code, "init_fn"))
      return "worker_init_fn";
  for (size_t i = frames.size(); i-- > 0;)
    if (owner_of(frames[i].file) == Owner::kUser) return frames[i].function;
  return "";
}

/// "496-511" for a run of consecutive indices, "3, 17, 250" otherwise (the first
/// kShownSamples of them, then "...").
std::string sample_list(const std::vector<int64_t>& samples) {
  std::string s;
  size_t i = 0;
  for (size_t shown = 0; i < samples.size() && shown < kShownSamples; ++shown) {
    size_t j = i;
    while (j + 1 < samples.size() && samples[j + 1] == samples[j] + 1) ++j;
    if (i) s += ", ";
    s += std::to_string(samples[i]);
    if (j >= i + 2) {
      s += '-';
      s += std::to_string(samples[j]);
      i = j + 1;
    } else {
      ++i;
    }
  }
  if (i < samples.size()) s += ", ...";
  return s;
}

/// The one sample of the batch whose index the exception's text names ("bad sample 500",
/// "record 500"), else nullopt: the one to look at first.
std::optional<int64_t> named_sample(const std::vector<int64_t>& samples, std::string_view msg) {
  std::optional<int64_t> found;
  for (size_t i = 0; i < msg.size();) {
    if (!std::isdigit((unsigned char)msg[i])) {
      ++i;
      continue;
    }
    size_t j = i;
    while (j < msg.size() && std::isdigit((unsigned char)msg[j])) ++j;
    const bool word = (i == 0 || !std::isalnum((unsigned char)msg[i - 1])) &&
                      (j == msg.size() || !std::isalnum((unsigned char)msg[j]));
    if (word && j - i < 18) {
      const int64_t v = std::atoll(std::string(msg.substr(i, j - i)).c_str());
      if (std::find(samples.begin(), samples.end(), v) != samples.end()) {
        if (found && *found != v) return std::nullopt;  // two of them: no one suspect
        found = v;
      }
    }
    i = j;
  }
  return found;
}

/// Which exceptions say what about the data.
enum class Kind {
  kIndex,    ///< IndexError, KeyError: asked for what the dataset does not hold
  kMissing,  ///< a file that is not there or cannot be opened
  kCollate,  ///< the batch's samples do not fit together
  kBug,      ///< TypeError, AttributeError, NameError, ...: the code, not the data
  kData,     ///< the rest: a sample that cannot be read or decoded (corrupt, truncated)
};

Kind kind_of(const Evidence& e) {
  const std::string_view t = short_type(e.type);
  if (t == "IndexError" || t == "KeyError") return Kind::kIndex;
  if (t == "FileNotFoundError" || t == "PermissionError" || t == "IsADirectoryError" ||
      t == "NotADirectoryError")
    return Kind::kMissing;
  if (e.stage == "collate_fn") return Kind::kCollate;
  if (t == "TypeError" || t == "AttributeError" || t == "NameError" || t == "UnboundLocalError" ||
      t == "AssertionError" || t == "ZeroDivisionError" || t == "NotImplementedError" ||
      t == "ImportError" || t == "ModuleNotFoundError" || t == "RecursionError")
    return Kind::kBug;
  return Kind::kData;
}

}  // namespace

std::vector<Frame> parse_traceback(std::string_view text) {
  // The exception raised is the last traceback's (a chained one's context comes before).
  size_t start = text.rfind("Traceback (most recent call last):");
  if (start == std::string_view::npos) start = 0;
  std::vector<Frame> out;
  size_t pos = start;
  bool want_code = false;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) nl = text.size();
    const std::string_view raw = text.substr(pos, nl - pos);
    const std::string_view line = trim(raw);
    pos = nl + 1;
    if (line.substr(0, 6) == "File \"") {
      const size_t q = line.find('"', 6);
      const size_t ln = line.find(", line ", q == std::string_view::npos ? 0 : q);
      if (q == std::string_view::npos || ln == std::string_view::npos) continue;
      Frame f;
      f.file = std::string(line.substr(6, q - 6));
      f.line = std::atoi(std::string(line.substr(ln + 7, 12)).c_str());
      const size_t in = line.find(", in ", ln);
      if (in != std::string_view::npos) f.function = std::string(line.substr(in + 5));
      out.push_back(std::move(f));
      want_code = true;
    } else if (want_code && raw.substr(0, 4) == "    " && !line.empty() &&
               line.find_first_not_of("^~ ") != std::string_view::npos) {
      out.back().code = std::string(line.substr(0, 300));
      want_code = false;
    } else if (!raw.empty() && raw.front() != ' ') {
      want_code = false;  // the exception's line, or text between tracebacks
    }
  }
  return out;
}

std::string short_path(std::string_view file) {
  for (std::string_view p : {"/site-packages/", "/dist-packages/"}) {
    const size_t at = file.rfind(p);
    if (at != std::string_view::npos) return std::string(file.substr(at + p.size()));
  }
  return std::string(file);
}

std::string frame_text(const Frame& f) {
  std::string s = short_path(f.file) + ":" + std::to_string(f.line);
  if (!f.function.empty()) s += " in " + f.function;
  return s;
}

std::vector<Evidence> detect(const JobView& job) {
  std::vector<Evidence> out;
  for (const ErrorNote& l : job.failures.errors) {
    if (l.source != ErrorSource::kLoader) continue;
    if (classify_error(l.type, l.message) != ErrorKind::kOther) continue;  // other rules'
    const ErrorNote* w = nullptr;  // the fetch's own record, the newest before the raise
    for (const ErrorNote& x : job.failures.errors)
      if (x.source == ErrorSource::kWorker && same_error(x, l) && (!w || x.t_ns >= w->t_ns)) w = &x;
    const std::optional<int> reraised = reraised_worker(l.message);
    if (!w && !reraised) continue;  // not a fetch's exception: a death, a timeout
    if (w && classify_error(w->type, w->message) != ErrorKind::kOther) continue;

    auto known = std::find_if(out.begin(), out.end(),
                              [&](const Evidence& o) { return o.loader == l.loader; });
    if (known != out.end()) {  // the loop caught it and the loader raised again
      known->raised += l.count;
      continue;
    }
    Evidence e;
    e.loader = l.loader;
    e.type = w ? w->type : l.type;
    e.in_worker = w ? w->worker >= 0 : true;
    e.worker = w ? w->worker : *reraised;
    e.pid = w && w->worker >= 0 ? w->pid : 0;
    e.message = w ? message_line(w->message, "") : message_line(l.message, l.type);
    const std::vector<Frame> frames =
        parse_traceback(w && !w->traceback.empty() ? std::string_view(w->traceback)
                                                   : original_traceback(l.message));
    e.stage = stage_of(frames);
    // Deepest first: the frame that raised (a library's, perhaps), and the job's own code
    // that called into it.
    for (size_t i = frames.size(); i-- > 0;) {
      const Owner o = owner_of(frames[i].file);
      if (!e.raised_at && o != Owner::kTorch && o != Owner::kDldoctor) e.raised_at = frames[i];
      if (o == Owner::kUser) {
        if (e.raised_at->file != frames[i].file || e.raised_at->line != frames[i].line)
          e.user_frame = frames[i];  // raised_at is set: this frame is not torch's either
        break;
      }
    }
    if (w) {
      e.samples = w->samples;
      e.batch_index = w->index;
      e.epoch = w->epoch;
    }
    e.raised = l.count;
    for (const LoaderView& lv : job.loaders) {
      if (lv.loader != l.loader) continue;
      e.iterable = lv.config.iterable_dataset();
      e.batch_size = lv.config.batch_size.value_or(0);
      if (lv.dataset) e.dataset_length = lv.dataset->length;
      for (const EpochRecord& ep : lv.epochs)
        if (l.t_ns && ep.last_batch_ns > l.t_ns) e.went_on = true;
      if (job.whole_run && !e.went_on) e.batches_before = lv.batches;
    }
    // The job died of it: its failure. Caught by the loop, which went on: a warning (the
    // batches it skipped are data the model never saw).
    e.rank = e.went_on ? report::Rank{report::Severity::kWarning, report::Tier::kMeasure, 1.0}
                       : report::Rank{report::Severity::kCritical, report::Tier::kFailure, 0.0};
    out.push_back(std::move(e));
  }
  return out;
}

report::Finding finding(const Evidence& e) {
  report::Finding f = report::make_finding("loader_error", e.loader, e.rank);
  const std::string type = shown_type(e.type);
  const std::string where = e.in_worker ? "DataLoader worker " + std::to_string(e.worker)
                                        : std::string("the main process (num_workers=0)");
  const std::string stage = e.stage.empty() ? std::string("the fetch") : e.stage;
  const std::string samples = sample_list(e.samples);
  const Kind kind = kind_of(e);

  f.title = (e.went_on ? "The loader raised " : "The job ended with ") + type +
            (e.message.empty() ? "" : ": " + e.message) + ", raised in " + stage + " in " + where;
  f.add("exception", type + (e.message.empty() ? "" : ": " + e.message));
  f.add("stage", stage);
  f.add("worker", e.in_worker ? double(e.worker) : -1.0);
  if (e.pid) f.add("worker_pid", double(e.pid));
  if (e.raised_at) f.add("raised_at", frame_text(*e.raised_at));
  if (e.user_frame) f.add("user_frame", frame_text(*e.user_frame));
  if (!e.samples.empty()) {
    f.add("samples", samples);
    f.add("samples_in_batch", double(e.samples.size()));
  }
  if (e.batch_index >= 0) f.add("batch_index", double(e.batch_index));
  if (e.epoch > 0) f.add("epoch", double(e.epoch));
  if (e.batches_before) f.add("batches_before", double(*e.batches_before));
  if (e.dataset_length) f.add("dataset_length", double(*e.dataset_length));
  if (e.raised > 1) f.add("times_raised", double(e.raised));

  const std::string at = e.raised_at ? " at " + frame_text(*e.raised_at) : std::string();
  const std::string mine =
      e.user_frame ? frame_text(*e.user_frame) : (e.raised_at ? frame_text(*e.raised_at) : "");
  const std::optional<int64_t> suspect = e.samples.size() == 1
                                             ? std::optional<int64_t>(e.samples.front())
                                             : named_sample(e.samples, e.message);
  const std::string what = suspect              ? "sample " + std::to_string(*suspect)
                           : !e.samples.empty() ? "one of the samples " + samples
                                                : std::string("a record");
  const std::string look = what + (suspect && e.samples.size() > 1
                                       ? " (the message names it; the batch held " + samples + ")"
                                       : std::string());
  const int64_t first = suspect ? *suspect : e.samples.empty() ? 0 : e.samples.front();
  const std::string reproduce = e.samples.empty()
                                    ? std::string()
                                    : " `dataset[" + std::to_string(first) + "]`" +
                                          (suspect ? "" : " (and the others)") +
                                          " in one process reproduces it without workers.";
  const std::string stream_pos =
      e.iterable && e.batch_index >= 0
          ? " The IterableDataset's iterator failed in its batch " + std::to_string(e.batch_index) +
                (e.batch_size > 0
                     ? " (after about " + std::to_string(int64_t(e.batch_index) * e.batch_size) +
                           " samples of " + (e.in_worker ? "that worker's" : "its") + " stream)"
                     : std::string()) +
                "."
          : std::string();
  switch (kind) {
    case Kind::kIndex:
      f.fix = "The dataset was asked for " + (e.samples.empty() ? "an index" : what) +
              " it does not hold (" + type + at + ")" +
              (e.dataset_length
                   ? "; its __len__ says " + std::to_string(*e.dataset_length) +
                         ", and the sampler asks for 0.." + std::to_string(*e.dataset_length - 1)
                   : std::string()) +
              ". Make __len__ return the number of samples __getitem__ can serve, or complete "
              "the list or mapping the index is looked up in (a file list shorter than the "
              "labels, a key missing)." +
              reproduce + stream_pos;
      break;
    case Kind::kMissing:
      f.fix = "A file behind " + what + " cannot be opened (" + type + at +
              "). Regenerate the file list, or drop the missing files from it before building "
              "the dataset (checking os.path.exists once at start-up is cheaper than failing "
              "mid-epoch)." +
              reproduce + stream_pos;
      break;
    case Kind::kCollate:
      f.fix = "The samples of the batch" + (samples.empty() ? "" : " (" + samples + ")") +
              " do not collate together (" + type + at +
              "): one of them has another shape or type. Make __getitem__ return the same "
              "shape for every sample (resize, crop or pad it), or pass a collate_fn that pads "
              "(torch.nn.utils.rnn.pad_sequence) or keeps a list.";
      break;
    case Kind::kBug:
      f.fix = "A bug in the code, not the data: fix " + (mine.empty() ? stage : mine) + " (" +
              type + ")." + reproduce +
              " With num_workers=0 the exception is raised in the main process, where a "
              "debugger (python -m pdb) stops at it." +
              stream_pos;
      break;
    case Kind::kData:
      f.fix = "Look at " + look + ": it cannot be read as it is (" + type + at +
              "). Repair or remove it, or skip it: filter the bad indices out of the index "
              "list beforehand, or catch the error in __getitem__ and return None with a "
              "collate_fn that drops the Nones." +
              reproduce + stream_pos;
      break;
  }
  f.why = std::string(
              "An exception in the dataset's code or the collate_fn stops the DataLoader: in a "
              "worker, torch sends it to the main process, which raises it (\"Caught ... in "
              "DataLoader worker process N\") when the failing batch's turn comes, so the "
              "loop dies at that batch.") +
          (e.went_on ? " Here the loop caught it and went on: that batch's samples were never "
                       "trained on." +
                           (e.raised > 1 ? " It happened " + std::to_string(e.raised) + " times."
                                         : std::string())
                     : std::string(" Nothing about the loader's speed matters until it is fixed."));
  return f;
}

}  // namespace dldoctor::analyze::loader_error
