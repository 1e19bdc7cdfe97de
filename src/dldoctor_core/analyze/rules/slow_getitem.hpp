// slow_getitem (seed cause 2): the loop waits, the workers compute for most of each fetch,
// and at their count they cannot supply what the consumer asks for; most of the fetch is
// the dataset's __getitem__. Fix: more workers while CPUs are idle, else a cheaper
// __getitem__ (the hot step named when profiles are known).
#pragma once

#include <vector>

#include "dldoctor_core/analyze/capacity.hpp"

namespace dldoctor::analyze::slow_getitem {

struct Evidence {
  report::Rank rank;
  CpuBoundFetch fetch;
  double collate_share = 0;  ///< the rest of the fetch is __getitem__
};
/// One per loader whose CPU-bound fetch is mostly __getitem__.
std::vector<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::slow_getitem
