#include "dldoctor_core/sample/process_tree.hpp"

#include <algorithm>
#include <cstdio>
#include <unordered_set>

#include "dldoctor_core/sample/stat.hpp"

namespace dldoctor::sample {

std::vector<int> tree_order(const std::vector<int>& roots,
                            std::vector<std::pair<int, int>> pid_ppid) {
  // Sorted by (parent, pid), the children of p are one contiguous run.
  std::vector<std::pair<int, int>> by_parent;
  by_parent.reserve(pid_ppid.size());
  for (auto [pid, ppid] : pid_ppid) by_parent.emplace_back(ppid, pid);
  std::sort(by_parent.begin(), by_parent.end());
  std::sort(pid_ppid.begin(), pid_ppid.end());
  auto exists = [&](int pid) {
    auto it = std::lower_bound(pid_ppid.begin(), pid_ppid.end(), std::pair<int, int>(pid, INT32_MIN));
    return it != pid_ppid.end() && it->first == pid;
  };

  std::vector<int> order;
  std::unordered_set<int> placed;
  for (int root : roots) {
    if (!exists(root) || !placed.insert(root).second) continue;
    size_t head = order.size();
    order.push_back(root);
    while (head < order.size()) {
      const int parent = order[head++];
      auto it = std::lower_bound(by_parent.begin(), by_parent.end(),
                                 std::pair<int, int>(parent, INT32_MIN));
      for (; it != by_parent.end() && it->first == parent; ++it) {
        // A pid is its own parent only in broken input; placed guards against cycles too.
        if (placed.insert(it->second).second) order.push_back(it->second);
      }
    }
  }
  return order;
}

std::vector<int> ProcessTree::members(const std::vector<int>& roots, ReadBuffer& buf,
                                      std::optional<int64_t> forks, bool may_list) {
  const bool unchanged = forks && listed_forks_ == forks;
  if (listing_ > 0 && (unchanged || !may_list)) {
    if (!changed_ && roots == ordered_roots_) return members_;
    std::vector<std::pair<int, int>> pid_ppid;
    pid_ppid.reserve(parent_.size());
    for (const auto& [pid, entry] : parent_) pid_ppid.emplace_back(pid, entry.ppid);
    return remember(roots, tree_order(roots, std::move(pid_ppid)));
  }
  listed_forks_ = forks;
  ++listing_;
  const bool rescan = rescan_every_ > 0 && listing_ % uint64_t(rescan_every_) == 0;
  pids_.clear();
  proc_.numbers(buf, pids_);
  for (int pid : pids_) {
    auto [it, fresh] = parent_.try_emplace(pid);
    it->second.seen = listing_;
    if (!fresh && !rescan) continue;
    char path[48];
    std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
    auto text = read_whole(path, buf);
    auto stat = text ? parse_stat(*text) : std::nullopt;
    if (!stat) {
      parent_.erase(it);  // exited between the listing and the read
      continue;
    }
    it->second.ppid = stat->ppid;
  }
  std::vector<std::pair<int, int>> pid_ppid;
  pid_ppid.reserve(parent_.size());
  for (auto it = parent_.begin(); it != parent_.end();) {
    if (it->second.seen != listing_) {
      it = parent_.erase(it);
    } else {
      pid_ppid.emplace_back(it->first, it->second.ppid);
      ++it;
    }
  }
  return remember(roots, tree_order(roots, std::move(pid_ppid)));
}

const std::vector<int>& ProcessTree::remember(const std::vector<int>& roots,
                                              std::vector<int> members) {
  ordered_roots_ = roots;
  members_ = std::move(members);
  changed_ = false;
  return members_;
}

void ProcessTree::set_parent(int pid, int ppid) noexcept {
  auto it = parent_.find(pid);
  if (it != parent_.end() && it->second.ppid != ppid) {
    it->second.ppid = ppid;
    changed_ = true;
  }
}

void ProcessTree::forget(int pid) noexcept {
  if (parent_.erase(pid) > 0) changed_ = true;
}

}  // namespace dldoctor::sample
