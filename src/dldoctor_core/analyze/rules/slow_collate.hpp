// slow_collate (seed cause 2, in collate_fn): as slow_getitem, but most of the fetch is
// spent merging samples into a batch. Fix: more workers while CPUs are idle, else a
// collate_fn that does less per batch.
#pragma once

#include <vector>

#include "dldoctor_core/analyze/capacity.hpp"
#include "dldoctor_core/analyze/rules/slow_getitem.hpp"

namespace dldoctor::analyze::slow_collate {

struct Evidence : slow_getitem::Side {};
/// One per loader whose CPU-bound fetch is mostly collate_fn.
std::vector<Evidence> detect(const JobView& job);
report::Finding finding(const Evidence& e);

}  // namespace dldoctor::analyze::slow_collate
