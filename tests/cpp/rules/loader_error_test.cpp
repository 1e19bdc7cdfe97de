// loader_error at its edges: a fetch's exception the loader raised (worker and main process),
// torch's re-raised text alone, the frames parsed from a traceback (the user's, not torch's
// nor dldoctor's), the fix in the exception's terms, and the errors that are not its own (a
// dead worker, no room in /dev/shm, a training step's exception, one the loop caught).
#include "dldoctor_core/analyze/rules/loader_error.hpp"

#include <gtest/gtest.h>

#include "../analyze_sim.hpp"

namespace dldoctor::analyze {
namespace {

using namespace sim;

constexpr const char* kSite = "/venv/lib/python3.11/site-packages";

std::string worker_traceback(const std::string& user_file, const std::string& code_in_fetch,
                             const std::string& function, const std::string& last) {
  return std::string("Traceback (most recent call last):\n") + "  File \"" + kSite +
         "/torch/utils/data/_utils/fetch.py\", line 54, in fetch\n    " + code_in_fetch +
         "\n  File \"" + user_file + "\", line 36, in " + function +
         "\n    raise ValueError(f\"bad sample {i}\")\n" + last + "\n";
}

/// The fetch hook's record of a worker's exception, and the loader's raise of it.
ErrorNote fetch_error(int worker, std::string type, std::string message, std::string tb,
                      std::vector<int64_t> samples, int index, int64_t t) {
  ErrorNote w = error(message, ErrorSource::kWorker, type);
  w.worker = worker;
  w.pid = worker >= 0 ? 2000 + worker : 1000;
  w.traceback = std::move(tb);
  w.samples = std::move(samples);
  w.index = index;
  w.epoch = 1;
  w.t_ns = t;
  return w;
}

ErrorNote loader_raise(std::string type, std::string message, int64_t t) {
  ErrorNote l = error(std::move(message), ErrorSource::kLoader, std::move(type));
  l.t_ns = t;
  return l;
}

/// A loader fed for 20 s whose batch at t (after the last one) failed.
struct Crashed {
  Loader l;
  std::unique_ptr<Session> s;
  int64_t end = 0;
  explicit Crashed(int workers = 2) {
    l.num_workers = workers;
    s = std::make_unique<Session>();
    s->set_facts(facts(8));
    end = feed(*s, l, kT0, 20);
  }
};

TEST(AnalyzeLoaderError, AWorkersCorruptSampleIsCriticalWithItsSamplesAndFrame) {
  Crashed c;
  c.s->note(
      fetch_error(0, "builtins.ValueError", "bad sample 500",
                  worker_traceback("/home/me/train.py",
                                   "data = [self.dataset[idx] for idx in possibly_batched_index]",
                                   "__getitem__", "ValueError: bad sample 500"),
                  {496, 497, 498, 499, 500, 501}, 31, c.end + kMs));
  c.s->note(loader_raise("builtins.ValueError",
                         "Caught ValueError in DataLoader worker process 0.\nOriginal "
                         "Traceback (most recent call last):\n...\nValueError: bad sample 500",
                         c.end + 2 * kMs));
  auto fs = whole(*c.s);
  ASSERT_EQ(loud_ids(fs), std::vector<std::string>{"loader_error"});
  const report::Finding& f = *find(fs, "loader_error");
  EXPECT_EQ(f.severity, report::Severity::kCritical);
  EXPECT_EQ(f.tier, report::Tier::kFailure);
  EXPECT_EQ(Session::verdict(fs), "loader_error");
  EXPECT_EQ(*text(f, "exception"), "ValueError: bad sample 500");
  EXPECT_EQ(*text(f, "stage"), "__getitem__");
  EXPECT_EQ(*num(f, "worker"), 0.0);
  EXPECT_EQ(*num(f, "worker_pid"), 2000.0);
  EXPECT_EQ(*text(f, "raised_at"), "/home/me/train.py:36 in __getitem__");
  EXPECT_FALSE(text(f, "user_frame"));  // the user's frame raised it itself
  EXPECT_EQ(*text(f, "samples"), "496-501");
  EXPECT_EQ(*num(f, "batch_index"), 31.0);
  EXPECT_GT(*num(f, "batches_before"), 100.0);  // the 20 s fed before it
  EXPECT_NE(f.title.find("The job ended with ValueError: bad sample 500"), std::string::npos);
  EXPECT_NE(f.fix.find("Look at sample 500 (the message names it; the batch held 496-501)"),
            std::string::npos)
      << f.fix;
  EXPECT_NE(f.fix.find("`dataset[500]` in one process"), std::string::npos) << f.fix;
  EXPECT_NE(f.fix.find("skip it"), std::string::npos) << f.fix;
}

TEST(AnalyzeLoaderError, MainProcessFetchNamesTheMainProcessAndTheLibraryFrame) {
  Crashed c(0);
  const std::string tb =
      worker_traceback("/home/me/data.py", "data = [self.dataset[idx] for idx in batch]",
                       "__getitem__", "") +
      "";  // then a library frame below the user's
  std::string deeper = tb.substr(0, tb.rfind("    raise")) +
                       "    img = Image.open(path)\n  File \"" + kSite +
                       "/PIL/Image.py\", line 3280, in open\n    raise "
                       "UnidentifiedImageError(msg)\nPIL.UnidentifiedImageError: cannot "
                       "identify image file 'x.jpg'\n";
  c.s->note(fetch_error(-1, "PIL.UnidentifiedImageError", "cannot identify image file 'x.jpg'",
                        deeper, {7}, 3, c.end + kMs));
  c.s->note(loader_raise("PIL.UnidentifiedImageError", "cannot identify image file 'x.jpg'",
                         c.end + 2 * kMs));
  auto fs = whole(*c.s);
  const report::Finding* f = find(fs, "loader_error");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*num(*f, "worker"), -1.0);
  EXPECT_FALSE(num(*f, "worker_pid"));
  EXPECT_NE(f->title.find("the main process (num_workers=0)"), std::string::npos) << f->title;
  EXPECT_EQ(*text(*f, "raised_at"), "PIL/Image.py:3280 in open");  // site-packages shortened
  EXPECT_EQ(*text(*f, "user_frame"), "/home/me/data.py:36 in __getitem__");
  EXPECT_NE(f->fix.find("Look at sample 7"), std::string::npos) << f->fix;
}

TEST(AnalyzeLoaderError, TheFixSpeaksTheExceptionsTerms) {
  auto fix_for = [](std::string type, std::string code_in_fetch, std::string function) {
    Crashed c;
    const std::string tb =
        worker_traceback("/home/me/train.py", code_in_fetch, function, type + ": x");
    c.s->note(fetch_error(1, "builtins." + type, "x", tb, {12}, 4, c.end + kMs));
    c.s->note(loader_raise("builtins." + type,
                           "Caught " + type + " in DataLoader worker process 1.", c.end + 2 * kMs));
    auto fs = whole(*c.s);
    const report::Finding* f = find(fs, "loader_error");
    return f ? f->fix + " | stage " + *text(*f, "stage") : std::string("none");
  };
  const std::string getitem = "data = [self.dataset[idx] for idx in possibly_batched_index]";
  EXPECT_NE(
      fix_for("IndexError", getitem, "__getitem__").find("asked for sample 12 it does not hold"),
      std::string::npos);
  EXPECT_NE(fix_for("KeyError", getitem, "__getitem__").find("__len__"), std::string::npos);
  EXPECT_NE(fix_for("FileNotFoundError", getitem, "__getitem__").find("Regenerate the file list"),
            std::string::npos);
  const std::string collate = fix_for("RuntimeError", "return self.collate_fn(data)", "pad");
  EXPECT_NE(collate.find("do not collate together"), std::string::npos) << collate;
  EXPECT_NE(collate.find("stage collate_fn"), std::string::npos) << collate;
  EXPECT_NE(fix_for("TypeError", getitem, "__getitem__").find("A bug in the code"),
            std::string::npos);
  const std::string batched =
      fix_for("ValueError", "data = self.dataset.__getitems__(idx)", "__getitems__");
  EXPECT_NE(batched.find("stage __getitems__"), std::string::npos) << batched;
}

TEST(AnalyzeLoaderError, TorchsReraisedTextAloneIsEnough) {
  // An exception in the worker's start-up (iter(dataset) of an IterableDataset): the fetch
  // hook saw nothing; torch's text carries the worker's traceback.
  Crashed c;
  const std::string message =
      std::string(
          "Caught OSError in DataLoader worker process 1.\nOriginal Traceback (most "
          "recent call last):\n  File \"") +
      kSite +
      "/torch/utils/data/_utils/worker.py\", line 340, in _worker_loop\n    fetcher = "
      "_DatasetKind.create_fetcher(\n  File \"/srv/stream.py\", line 20, in __iter__\n    "
      "raise OSError('no shard')\nOSError: no shard\n";
  c.s->note(loader_raise("builtins.OSError", message, c.end + kMs));
  auto fs = whole(*c.s);
  const report::Finding* f = find(fs, "loader_error");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(*num(*f, "worker"), 1.0);
  EXPECT_EQ(*text(*f, "exception"), "OSError: no shard");
  EXPECT_EQ(*text(*f, "raised_at"), "/srv/stream.py:20 in __iter__");
  EXPECT_EQ(*text(*f, "stage"), "__iter__");
  EXPECT_FALSE(text(*f, "samples"));
}

TEST(AnalyzeLoaderError, CaughtByTheLoopItIsAWarningThatCountsTheRaises) {
  Crashed c;
  const int64_t t = kT0 + 5 * kS;  // mid-run: batches came after it
  c.s->note(fetch_error(0, "builtins.ValueError", "bad sample 13", "", {13}, 0, t - kMs));
  c.s->note(
      loader_raise("builtins.ValueError", "Caught ValueError in DataLoader worker process 0.", t));
  c.s->note(fetch_error(1, "builtins.ValueError", "bad sample 99", "", {99}, 7, t + kS - kMs));
  c.s->note(loader_raise("builtins.ValueError",
                         "Caught ValueError in DataLoader worker process 1. ", t + kS));
  auto fs = whole(*c.s);
  const report::Finding* f = find(fs, "loader_error");
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->severity, report::Severity::kWarning);
  EXPECT_EQ(*num(*f, "times_raised"), 2.0);
  EXPECT_FALSE(num(*f, "batches_before"));
  EXPECT_NE(f->why.find("caught it and went on"), std::string::npos) << f->why;
  EXPECT_EQ(Session::verdict(fs), "healthy");
}

TEST(AnalyzeLoaderError, OtherErrorsAreNotItsOwn) {
  auto ids_after = [](std::vector<ErrorNote> notes) {
    Crashed c;
    for (ErrorNote& n : notes) {
      n.t_ns = c.end + kMs;
      c.s->note(n);
    }
    return ids(whole(*c.s));
  };
  auto none = [](const std::vector<std::string>& v) {
    return std::find(v.begin(), v.end(), "loader_error") == v.end();
  };
  // A dead worker: torch's own RuntimeError, no fetch raised.
  EXPECT_TRUE(none(ids_after(
      {error("DataLoader worker (pid(s) 2001) exited unexpectedly", ErrorSource::kLoader)})));
  // A timeout.
  EXPECT_TRUE(
      none(ids_after({error("DataLoader timed out after 5 seconds", ErrorSource::kLoader)})));
  // The training step raised: the job ended, the loader did not raise.
  EXPECT_TRUE(
      none(ids_after({error("loss is NaN", ErrorSource::kUncaught, "builtins.ValueError")})));
  // A fetch raised and the loader never raised it (the job ended first for another reason).
  EXPECT_TRUE(
      none(ids_after({error("bad sample 1", ErrorSource::kWorker, "builtins.ValueError")})));
  // No room in /dev/shm is shm_exhausted's.
  EXPECT_TRUE(none(ids_after(
      {error("No space left on device (28) /dev/shm", ErrorSource::kWorker, "builtins.OSError"),
       error("Caught OSError in DataLoader worker process 0.\n...No space left on device (28) "
             "/dev/shm",
             ErrorSource::kLoader, "builtins.OSError")})));
  // Another loader's fetch error does not explain this loader's raise.
  ErrorNote other = error("bad", ErrorSource::kWorker, "builtins.ValueError");
  other.loader = 3;
  EXPECT_TRUE(none(ids_after({other, error("bad", ErrorSource::kLoader, "builtins.ValueError")})));
}

TEST(AnalyzeLoaderError, TracebackFramesAndOwners) {
  EXPECT_EQ(owner_of("/usr/lib/python3/dist-packages/torch/utils/data/_utils/fetch.py"),
            Owner::kTorch);
  EXPECT_EQ(owner_of("/src/dldoctor/job/worker.py"), Owner::kDldoctor);
  EXPECT_EQ(owner_of("/venv/lib/python3.11/site-packages/numpy/core/x.py"), Owner::kLibrary);
  EXPECT_EQ(owner_of("/usr/lib/python3.11/json/decoder.py"), Owner::kLibrary);
  EXPECT_EQ(owner_of("<frozen importlib._bootstrap>"), Owner::kLibrary);
  EXPECT_EQ(owner_of("/home/me/project/data.py"), Owner::kUser);
  // A chained exception: the frames of the one raised (the last traceback).
  const auto frames = loader_error::parse_traceback(
      "Traceback (most recent call last):\n  File \"/a.py\", line 1, in f\n    x()\nKeyError: 1\n\n"
      "During handling of the above exception, another exception occurred:\n\n"
      "Traceback (most recent call last):\n  File \"/b.py\", line 2, in g\n    y()\n"
      "    ^^^\n  File \"/c.py\", line 3, in h\n    raise ValueError()\nValueError\n");
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(frames[0].file, "/b.py");
  EXPECT_EQ(frames[0].code, "y()");
  EXPECT_EQ(frames[1].line, 3);
  EXPECT_EQ(frames[1].function, "h");
  EXPECT_EQ(loader_error::short_path("/v/lib/python3.11/site-packages/PIL/Image.py"),
            "PIL/Image.py");
}

}  // namespace
}  // namespace dldoctor::analyze
