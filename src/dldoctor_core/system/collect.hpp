// One pass over every machine-facts reader: what `dldoctor check`, `dldoctor run` and the
// analyzer start from.
#pragma once

#include <string>

#include "dldoctor_core/system/facts.hpp"

namespace dldoctor::system {

/// Where the readers look; the defaults are the real machine, tests point them elsewhere.
struct CollectOptions {
  std::string shm_path = "/dev/shm";
  std::string proc_root = "/proc";
  std::string sys_root = "/sys";
  std::string root = "/";  ///< where /.dockerenv and /run/.containerenv are looked for
  bool gpus = true;        ///< list the GPUs through NVML (false: gpu stays "not measured")
};

/// Facts about this process and its machine. Never throws for a missing source: that field is
/// left unknown.
Facts collect(const CollectOptions& options = {});

}  // namespace dldoctor::system
