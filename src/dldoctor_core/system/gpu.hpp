// The machine's GPUs as NVML lists them: name, memory and current utilization per device,
// or why they could not be listed (what `dldoctor check` and the report's system section
// show). The per-pass readings of a run are the sampler's (sample/gpu_reader).
#pragma once

#include "dldoctor_core/system/facts.hpp"
#include "dldoctor_core/system/nvml.hpp"

namespace dldoctor::system {

/// The devices `nvml` sees; not measured, with the reason, when NVML cannot be used.
GpuFacts read_gpus(const Nvml& nvml);

}  // namespace dldoctor::system
