// Per-process limits that DataLoaders run into: open files and locked memory.
#pragma once

#include <sys/resource.h>

#include <cstdint>
#include <optional>
#include <string>

#include "dldoctor_core/system/facts.hpp"

namespace dldoctor::system {

/// A limit value in the facts' convention: RLIM_INFINITY -> empty (unlimited).
std::optional<int64_t> rlimit_value(rlim_t value) noexcept;

/// Entries of `<proc_root>/self/fd`, not counting the one used to list it; empty when unreadable.
std::optional<int64_t> count_open_fds(const std::string& proc_root);

/// RLIMIT_NOFILE, RLIMIT_MEMLOCK and the open fd count.
LimitFacts read_limits(const std::string& proc_root);

}  // namespace dldoctor::system
