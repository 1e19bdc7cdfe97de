#include "dldoctor_core/sample/process_tree.hpp"

#include <dirent.h>

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

std::vector<int> ProcessTree::members(const std::vector<int>& roots, ReadBuffer& buf) {
  ++listing_;
  const bool rescan = rescan_every_ > 0 && listing_ % uint64_t(rescan_every_) == 0;
  if (DIR* dir = opendir("/proc")) {
    while (dirent* e = readdir(dir)) {
      const char* name = e->d_name;
      if (name[0] < '1' || name[0] > '9') continue;
      int pid = 0;
      for (const char* c = name; *c; ++c) {
        if (*c < '0' || *c > '9') {
          pid = 0;
          break;
        }
        pid = pid * 10 + (*c - '0');
      }
      if (pid <= 0) continue;
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
    closedir(dir);
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
  return tree_order(roots, std::move(pid_ppid));
}

void ProcessTree::set_parent(int pid, int ppid) noexcept {
  auto it = parent_.find(pid);
  if (it != parent_.end()) it->second.ppid = ppid;
}

}  // namespace dldoctor::sample
