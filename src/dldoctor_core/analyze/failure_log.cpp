// Folding failure notes into bounded state: deaths merged from their event and their
// side-log record, error texts folded by text, CUDA peaks kept per batch size.
#include "dldoctor_core/analyze/failure_log.hpp"

#include <algorithm>
#include <cctype>

namespace dldoctor::analyze {

namespace {

bool contains(std::string_view hay, std::string_view needle) noexcept {
  return hay.find(needle) != std::string_view::npos;
}

bool contains_nocase(std::string_view hay, std::string_view needle) noexcept {
  auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end(), [](char a, char b) {
    return std::tolower((unsigned char)a) == std::tolower((unsigned char)b);
  });
  return it != hay.end();
}

bool in_window(int64_t t, int64_t from, int64_t to) noexcept {
  // A note without a time (0) counts in every window: it is known, just not when.
  return from < 0 || t == 0 || (t >= from && t <= to);
}

template <class T>
void keep(std::optional<T>& into, const std::optional<T>& from) {
  if (from) into = from;
}

}  // namespace

ErrorKind classify_error(std::string_view type, std::string_view message) noexcept {
  if (contains(type, "OutOfMemoryError") || contains_nocase(message, "CUDA out of memory") ||
      contains(message, "CUDA error: out of memory"))
    return ErrorKind::kCudaOom;
  // EMFILE, in any of its spellings; "received 0 items of ancdata" is the main process
  // failing to receive a tensor's fd from a worker (file_descriptor strategy) for the same
  // reason.
  if (contains(message, "Too many open files") || contains(message, "items of ancdata") ||
      contains(message, "Errno 24]"))
    return ErrorKind::kTooManyOpenFiles;
  // "No space left on device" alone could be a full disk under a checkpoint; it is /dev/shm
  // when the text names shared memory or torch's segment files (/torch_<pid>_...).
  const bool no_space =
      contains(message, "No space left on device") || contains(message, "Errno 28]");
  const bool shm = contains_nocase(message, "shared memory") || contains(message, "(shm)") ||
                   contains(message, "/dev/shm") || contains(message, "</torch_") ||
                   contains(message, "/torch_");
  if (no_space && shm) return ErrorKind::kShmNoSpace;
  // torch's worker handler for SIGBUS says so itself, and its main process's death message
  // for a bus error points at shared memory.
  if (contains_nocase(message, "bus error") && shm) return ErrorKind::kShmNoSpace;
  return ErrorKind::kOther;
}

std::string error_line(std::string_view message, ErrorKind kind) {
  std::vector<std::string_view> keys;
  switch (kind) {
    case ErrorKind::kShmNoSpace:
      keys = {"No space left on device", "Errno 28]", "bus error", "Bus error"};
      break;
    case ErrorKind::kTooManyOpenFiles:
      keys = {"Too many open files", "ancdata", "Errno 24]"};
      break;
    case ErrorKind::kCudaOom:
      keys = {"out of memory"};
      break;
    case ErrorKind::kOther:
      break;
  }
  std::string_view last;
  size_t pos = 0;
  while (pos <= message.size()) {
    size_t nl = message.find('\n', pos);
    if (nl == std::string_view::npos) nl = message.size();
    std::string_view line = message.substr(pos, nl - pos);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
    if (!line.empty()) {
      for (std::string_view k : keys)
        if (contains(line, k)) return std::string(line.substr(0, 300));
      last = line;
    }
    pos = nl + 1;
  }
  return std::string(last.substr(0, 300));
}

const RuntimeNote* FailureView::job_runtime() const noexcept {
  const RuntimeNote* best = nullptr;
  for (const RuntimeNote& r : runtime)
    if (!best || r.t_ns >= best->t_ns) best = &r;
  return best;
}

const RuntimeNote* FailureView::limits_of(int pid) const noexcept {
  if (pid <= 0) return nullptr;
  const RuntimeNote* best = nullptr;
  for (const std::vector<RuntimeNote>* notes : {&process_limits, &runtime})
    for (const RuntimeNote& r : *notes)
      if (r.pid == pid && (r.nofile_soft || r.nofile_unlimited) && (!best || r.t_ns > best->t_ns))
        best = &r;
  return best;
}

const RuntimeNote* FailureView::runtime_of(int loader) const noexcept {
  for (const RuntimeNote& r : runtime)
    if (r.loader == loader) return &r;
  return nullptr;
}

void FailureLog::on_death_event(const trace::Event& e) {
  WorkerDeath d;
  d.loader = e.loader;
  d.worker = e.worker;
  d.pid = e.v[2] > 0 ? int(e.v[2]) : 0;
  if (e.v[1] > 0)
    d.signal = int(e.v[1]);
  else if (e.v[0] >= 0)
    d.exit_code = int(e.v[0]);
  d.t_ns = e.t_ns;
  add_death(std::move(d));
}

void FailureLog::add_death(WorkerDeath d) {
  // The event and the side-log record of one death arrive separately (ring vs file):
  // merge them by pid, else by loader and worker id into an entry without a message yet.
  auto same = [&](const WorkerDeath& o) {
    if (d.pid > 0 && o.pid > 0) return d.pid == o.pid;
    return o.loader == d.loader && o.worker == d.worker && (o.message.empty() || d.message.empty());
  };
  auto it = std::find_if(deaths_.begin(), deaths_.end(), same);
  if (it == deaths_.end()) {
    if (deaths_.size() >= kMaxDeaths) return;
    deaths_.push_back(std::move(d));
    return;
  }
  WorkerDeath& o = *it;
  if (!o.pid) o.pid = d.pid;
  if (o.worker < 0) o.worker = d.worker;
  if (o.loader < 0) o.loader = d.loader;
  if (!o.exit_code && !o.signal) {
    o.exit_code = d.exit_code;
    o.signal = d.signal;
  }
  if (o.message.empty()) o.message = std::move(d.message);
  if (o.stderr_tail.empty()) o.stderr_tail = std::move(d.stderr_tail);
  keep(o.cgroup_oom_kills, d.cgroup_oom_kills);
  keep(o.machine_oom_kills, d.machine_oom_kills);
  keep(o.cgroup_limit_bytes, d.cgroup_limit_bytes);
  keep(o.cgroup_usage_bytes, d.cgroup_usage_bytes);
  keep(o.cgroup_peak_bytes, d.cgroup_peak_bytes);
  keep(o.rss_peak_bytes, d.rss_peak_bytes);
  if (!o.t_ns || (d.t_ns && d.t_ns < o.t_ns)) o.t_ns = d.t_ns;
}

void FailureLog::add_error(ErrorNote e) {
  for (ErrorNote& o : errors_) {
    if (o.source == e.source && o.message == e.message && o.type == e.type) {
      o.count += e.count;
      keep(o.cuda_peak_bytes, e.cuda_peak_bytes);
      keep(o.cuda_total_bytes, e.cuda_total_bytes);
      return;
    }
  }
  if (errors_.size() >= kMaxErrors) return;
  errors_.push_back(std::move(e));
}

void FailureLog::add_cuda(const CudaMemoryNote& c) {
  if (!c.batch_size || *c.batch_size <= 0 || c.peak_bytes <= 0) return;
  for (CudaPeak& p : cuda_) {
    if (p.loader == c.loader && p.device == c.device && p.batch_size == *c.batch_size) {
      p.peak_bytes = std::max(p.peak_bytes, c.peak_bytes);
      if (c.allocated_bytes)
        p.baseline_bytes =
            std::min(p.baseline_bytes.value_or(*c.allocated_bytes), *c.allocated_bytes);
      keep(p.total_bytes, c.total_bytes);
      p.t_ns = std::max(p.t_ns, c.t_ns);
      return;
    }
  }
  if (cuda_.size() >= kMaxCuda) return;
  cuda_.push_back(CudaPeak{c.loader, c.device, *c.batch_size, c.peak_bytes, c.allocated_bytes,
                           c.total_bytes, c.t_ns});
}

namespace {
/// Headroom of a cgroup reading (limit − usage); empty when either is unknown.
std::optional<int64_t> headroom(const CgroupMemoryNote& n) {
  if (!n.limit_bytes || !n.usage_bytes) return std::nullopt;
  return *n.limit_bytes - *n.usage_bytes;
}
bool tighter(const CgroupMemoryNote& a, const std::optional<CgroupMemoryNote>& b) {
  if (!b) return true;
  auto ha = headroom(a), hb = headroom(*b);
  if (!ha) return false;
  return !hb || *ha < *hb;
}
}  // namespace

void FailureLog::note(FailureNote n) {
  if (auto* d = std::get_if<WorkerDeath>(&n)) {
    add_death(std::move(*d));
  } else if (auto* e = std::get_if<ErrorNote>(&n)) {
    add_error(std::move(*e));
  } else if (auto* r = std::get_if<RuntimeNote>(&n)) {
    if (r->process_only) {
      if (!process_limits_.count(r->pid) && process_limits_.size() >= kMaxProcessLimits)
        process_limits_.erase(process_limits_.begin());
      process_limits_[r->pid] = std::move(*r);
    } else {
      runtime_[r->loader] = std::move(*r);
    }
  } else if (auto* c = std::get_if<CgroupMemoryNote>(&n)) {
    if (tighter(*c, cgroup_tightest_)) cgroup_tightest_ = *c;
    if (cgroup_.size() >= kMaxCgroup) cgroup_.erase(cgroup_.begin());
    cgroup_.push_back(*c);
  } else if (auto* m = std::get_if<CudaMemoryNote>(&n)) {
    add_cuda(*m);
  }
}

FailureView FailureLog::view(int64_t from_ns, int64_t to_ns) const {
  FailureView v;
  for (const WorkerDeath& d : deaths_)
    if (in_window(d.t_ns, from_ns, to_ns)) v.deaths.push_back(d);
  for (const ErrorNote& e : errors_)
    if (in_window(e.t_ns, from_ns, to_ns)) v.errors.push_back(e);
  for (const auto& [loader, r] : runtime_) v.runtime.push_back(r);
  for (const auto& [pid, r] : process_limits_) v.process_limits.push_back(r);
  if (from_ns < 0) {
    v.cgroup_memory = cgroup_tightest_;
  } else {
    for (const CgroupMemoryNote& c : cgroup_)
      if (in_window(c.t_ns, from_ns, to_ns) && tighter(c, v.cgroup_memory)) v.cgroup_memory = c;
  }
  // Peaks are the job's capacity, not an event: every window sees all of them.
  v.cuda = cuda_;
  return v;
}

}  // namespace dldoctor::analyze
