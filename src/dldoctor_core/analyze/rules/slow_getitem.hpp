// slow_getitem (seed cause 2): the loop waits, the workers compute for most of each fetch,
// and at their count they cannot supply what the consumer asks for; most of the fetch is
// the dataset's __getitem__. Fix: more workers while CPUs are idle, else a cheaper
// __getitem__ (the hot step named when profiles are known).
#pragma once

#include <string>
#include <vector>

#include "dldoctor_core/analyze/capacity.hpp"

namespace dldoctor::analyze::slow_getitem {

/// A CPU-bound fetch on one side of the kCollateShare split: slow_getitem's evidence, and
/// slow_collate's (each its own type, so that `finding` is found in its rule's namespace).
struct Side {
  report::Rank rank;
  CpuBoundFetch fetch;
  double collate_share = 0;  ///< the rest of the fetch is __getitem__
};
struct Evidence : Side {};
/// The CPU-bound fetches mostly in collate_fn (`collate`) or mostly in __getitem__, each
/// scored by its side's share of the stall.
std::vector<Side> split(const JobView& job, bool collate);
/// How both findings open: id, loader and rank, "Loader N: " + title_tail, the fetch figures.
report::Finding head(const char* id, const Side& e, const std::string& title_tail);

/// One per loader whose CPU-bound fetch is mostly __getitem__.
std::vector<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::slow_getitem
