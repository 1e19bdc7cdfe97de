// Which processes make up the watched tree. /proc/<pid>/task/<tid>/children would name the
// children directly but needs CONFIG_PROC_CHILDREN (absent on some kernels, this test machine
// among them) and one read per thread of every member; instead the /proc listing is scanned once
// per pass and only processes not seen before have their stat read for the parent. Members'
// parents are refreshed by the sampler's own stat reads, and every process's parent is re-read
// every `rescan_every` passes, in case a pid was reused between two listings.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dldoctor_core/sample/proc_file.hpp"

namespace dldoctor::sample {

/// Orders a tree: each root that exists in `pid_ppid` followed by its descendants breadth-first
/// (siblings by pid), then the next root; every pid appears once.
std::vector<int> tree_order(const std::vector<int>& roots,
                            std::vector<std::pair<int, int>> pid_ppid);

/// The processes of the machine and their parents, kept up to date pass by pass.
class ProcessTree {
 public:
  /// `rescan_every`: passes between full re-reads of every process's parent.
  explicit ProcessTree(int rescan_every = 50) : rescan_every_(rescan_every) {}

  /// Lists /proc and returns the roots and their descendants in tree_order.
  std::vector<int> members(const std::vector<int>& roots, ReadBuffer& buf);

  /// Records a parent learnt from a fresh stat read of a member.
  void set_parent(int pid, int ppid) noexcept;

  /// Processes seen in the last listing.
  size_t known() const noexcept { return parent_.size(); }

 private:
  struct Entry {
    int ppid = 0;
    uint64_t seen = 0;  // listing in which it was last present
  };
  std::unordered_map<int, Entry> parent_;
  uint64_t listing_ = 0;
  int rescan_every_;
};

}  // namespace dldoctor::sample
