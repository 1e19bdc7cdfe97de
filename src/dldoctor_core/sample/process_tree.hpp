// Which processes make up the watched tree. /proc/<pid>/task/<tid>/children would name the
// children directly but needs CONFIG_PROC_CHILDREN (absent on some kernels, this test machine
// among them) and one read per thread of every member; instead /proc is listed and only
// processes not seen before have their stat read for the parent. Listing /proc costs about
// 2 us per process of the machine (more with the stat reads of new ones while something
// compiles), so the sampler allows it only on its slow passes (once a second at 10 Hz: a
// process living shorter may be missed, a DataLoader worker lives longer), and it is skipped
// while /proc/stat's fork counter stands still: no fork, no new member. Members' parents are
// refreshed by the sampler's own stat reads, and every process's parent is re-read every
// `rescan_every` listings, in case a pid was reused between two of them.
#pragma once

#include <cstdint>
#include <optional>
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
  /// `rescan_every`: listings between full re-reads of every process's parent.
  explicit ProcessTree(int rescan_every = 50) : rescan_every_(rescan_every) {}

  /// The roots and their descendants in tree_order. /proc is listed again only when
  /// `may_list` and `forks`, the machine's fork counter read *before* this call (empty when
  /// unknown), has moved since the last listing; the first call always lists.
  std::vector<int> members(const std::vector<int>& roots, ReadBuffer& buf,
                           std::optional<int64_t> forks = std::nullopt, bool may_list = true);

  /// Records a parent learnt from a fresh stat read of a member.
  void set_parent(int pid, int ppid) noexcept;

  /// Forgets a process found gone.
  void forget(int pid) noexcept;

  /// Processes known (as of the last listing, less those forgotten).
  size_t known() const noexcept { return parent_.size(); }

  /// How many times /proc has been listed.
  uint64_t listings() const noexcept { return listing_; }

 private:
  const std::vector<int>& remember(const std::vector<int>& roots, std::vector<int> members);

  struct Entry {
    int ppid = 0;
    uint64_t seen = 0;  // listing in which it was last present
  };
  std::unordered_map<int, Entry> parent_;
  uint64_t listing_ = 0;
  std::optional<int64_t> listed_forks_;  // the fork counter before the last listing
  FdBudget own_fds_{1};
  ProcDir proc_{"/proc", &own_fds_};
  std::vector<int> pids_;                // scratch for a listing
  std::vector<int> ordered_roots_, members_;  // the last order, reused while nothing changed
  bool changed_ = true;
  int rescan_every_;
};

}  // namespace dldoctor::sample
