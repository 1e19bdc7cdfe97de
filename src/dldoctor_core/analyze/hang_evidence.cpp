#include "dldoctor_core/analyze/hang_evidence.hpp"

#include <algorithm>

namespace dldoctor::analyze {

void add_process_evidence(report::Finding& f, const Suspect& s, const LoaderContext* loader,
                          double stalled_s) {
  const ProcessCapture& p = *s.process;
  f.add("worker", double(p.worker));
  f.add("pid", double(p.pid));
  f.add("stalled_s", stalled_s);
  if (const PyFrame* fr = s.reading.frame(p)) f.add("frame", format_frame(*fr));
  if (const PyFrame* top = s.reading.top(p)) {
    f.add("top_frame", format_frame(*top));
    if (!top->code.empty()) f.add("top_code", top->code);
  }
  if (!s.reading.wait.empty()) f.add("wait", s.reading.wait);
  if (!p.state.empty()) f.add("state", p.state);
  if (!p.wchan.empty()) f.add("wchan", p.wchan);
  if (!p.syscall.empty()) f.add("syscall", p.syscall);
  if (s.reading.cpu_share) f.add("cpu_share_since_stall", *s.reading.cpu_share);
  if (!p.stack_note.empty()) f.add("stack_note", p.stack_note);
  if (loader != nullptr) {
    if (std::string held = held_batches(loader, p.worker); !held.empty())
      f.add("held_batches", held);
    if (loader->waiting_batch) f.add("waiting_batch", double(*loader->waiting_batch));
  }
}

std::string held_batches(const LoaderContext* loader, int worker) {
  std::string held;
  if (loader == nullptr) return held;
  auto it = loader->outstanding.find(worker);
  if (it == loader->outstanding.end()) return held;
  for (int64_t b : it->second) held += (held.empty() ? "" : ", ") + std::to_string(b);
  return held;
}

bool holds_awaited_batch(const Suspect& s, const LoaderContext* loader) noexcept {
  if (loader == nullptr) return false;
  int worker = s.process->worker;
  if (loader->waiting_worker) return *loader->waiting_worker == worker;
  if (!loader->waiting_batch) return false;
  auto it = loader->outstanding.find(worker);
  return it != loader->outstanding.end() && std::find(it->second.begin(), it->second.end(),
                                                      *loader->waiting_batch) != it->second.end();
}

const Suspect& primary(const std::vector<Suspect>& suspects, const LoaderContext* loader) {
  for (const Suspect& s : suspects) {
    if (holds_awaited_batch(s, loader)) return s;
  }
  return suspects.front();
}

std::string list_suspects(const std::vector<Suspect>& suspects) {
  std::string out;
  for (const Suspect& s : suspects) {
    if (!out.empty()) out += ", ";
    out += s.process->worker < 0 ? std::string("main") : std::to_string(s.process->worker);
    out += " (pid " + std::to_string(s.process->pid) + ")";
  }
  return out;
}

std::vector<std::vector<Suspect>> by_loader(std::vector<Suspect> suspects) {
  std::stable_sort(suspects.begin(), suspects.end(),
                   [](const Suspect& a, const Suspect& b) { return a.loader < b.loader; });
  std::vector<std::vector<Suspect>> out;
  for (Suspect& s : suspects) {
    if (out.empty() || out.back().front().loader != s.loader) out.emplace_back();
    out.back().push_back(std::move(s));
  }
  return out;
}

std::string subject(const ProcessCapture& p) {
  if (p.worker < 0) return "The main process";
  return "Worker " + std::to_string(p.worker) + " of loader " + std::to_string(p.loader);
}

report::Tier hang_tier(const Suspect& s, const LoaderContext* loader) noexcept {
  return holds_awaited_batch(s, loader) ? report::Tier::kHangAwaited : report::Tier::kHang;
}

report::Rank SuspectGroup::rank(double stalled_s) const noexcept {
  return {report::Severity::kCritical, hang_tier(primary(), loader), stalled_s};
}

std::vector<SuspectGroup> group_by_loader(std::vector<Suspect> suspects,
                                          const HangContext& context) {
  std::vector<SuspectGroup> out;
  for (auto& members : by_loader(std::move(suspects))) {
    SuspectGroup g;
    g.loader = context.find(members.front().loader);
    g.primary_index = size_t(&primary(members, g.loader) - members.data());
    g.suspects = std::move(members);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace dldoctor::analyze
