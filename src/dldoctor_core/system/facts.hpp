// Facts about the machine a job runs on. Every field that could not be read is empty
// (std::nullopt = "unknown"), never 0: a 0 would read as a measured value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dldoctor::system {

/// CPUs the process may actually use.
struct CpuFacts {
  std::optional<int> online;               ///< hardware threads online (sysconf)
  std::optional<int> affinity;             ///< CPUs in sched_getaffinity
  std::optional<double> cgroup_quota;      ///< cgroup CPU quota in CPUs (v1 cfs, v2 cpu.max); empty = none
  std::optional<int> physical_cores;       ///< distinct cores among the affinity CPUs (sysfs topology)
  std::optional<double> usable;            ///< min(affinity, quota): what workers can really use
  std::string quota_source;                ///< file the quota was read from, "" when none
};

/// Memory of the machine and of the cgroup the process is in.
struct MemoryFacts {
  std::optional<int64_t> total_bytes;       ///< MemTotal
  std::optional<int64_t> available_bytes;   ///< MemAvailable
  std::optional<int64_t> swap_total_bytes;
  std::optional<int64_t> swap_free_bytes;
  std::optional<int64_t> cgroup_limit_bytes;  ///< empty when unlimited or unknown
  std::optional<int64_t> cgroup_usage_bytes;
  std::optional<int64_t> cgroup_working_set_bytes;  ///< usage less inactive page cache (reclaimable)
  std::string cgroup_source;  ///< limit file of the cgroup level with the least headroom, "" unknown
};

/// /dev/shm, where DataLoader workers put batches for the main process.
struct ShmFacts {
  std::string path = "/dev/shm";
  std::optional<int64_t> total_bytes;
  std::optional<int64_t> free_bytes;
  std::string fs_type;   ///< from mountinfo, e.g. tmpfs
  std::string options;   ///< superblock mount options (tmpfs keeps size= here)
};

/// Per-process resource limits.
struct LimitFacts {
  std::optional<int64_t> nofile_soft, nofile_hard;   ///< RLIMIT_NOFILE; empty = unlimited
  std::optional<int64_t> memlock_soft, memlock_hard; ///< RLIMIT_MEMLOCK; empty = unlimited
  std::optional<int64_t> open_fds;                   ///< fds open in this process now
};

/// The storage behind a data directory.
struct StorageFacts {
  std::string path;
  std::string mount_point;
  std::string fs_type;             ///< from mountinfo: ext4, xfs, nfs4, fuse.*, lustre, overlay, tmpfs ...
  std::string source;              ///< mount source (device or server:/export)
  bool network_fs = false;         ///< nfs, cifs, lustre, fuse.* with a remote source, ...
  std::string block_device;        ///< e.g. vda, nvme0n1 ("" when not a block device)
  std::string device_numbers;      ///< "MAJ:MIN" of the backing device
  std::optional<bool> rotational;  ///< from /sys/block/<dev>/queue/rotational
  std::optional<int64_t> files;    ///< files counted (bounded walk)
  std::optional<int64_t> bytes;    ///< their bytes
  bool count_truncated = false;    ///< the walk hit its bound
  std::optional<double> read_mb_s; ///< sequential read probe
  std::optional<int64_t> probe_bytes;  ///< bytes the probe read
  bool probe_cached = false;       ///< the probe could not bypass the page cache
};

/// One GPU as NVML lists it (system/gpu).
struct GpuDevice {
  int index = 0;  ///< NVML's index (nvidia-smi's), not torch's under CUDA_VISIBLE_DEVICES
  std::string name;
  std::string uuid;
  std::optional<int64_t> memory_total_bytes;
  std::optional<int64_t> memory_used_bytes;
  std::optional<int> utilization_pct;  ///< a kernel ran this % of NVML's last sample period
};

/// The machine's GPUs through NVML, or why they were not measured.
struct GpuFacts {
  bool measured = false;      ///< NVML answered (then an empty `devices` means no GPU)
  std::string not_measured;   ///< why not: no driver, a symbol missing, an NVML error
  std::string driver_version;
  std::vector<GpuDevice> devices;
  std::vector<std::string> device_errors;  ///< devices NVML lists but could not open
};

/// Everything `dldoctor check` and the analyzer know about the machine.
struct Facts {
  CpuFacts cpu;
  MemoryFacts memory;
  ShmFacts shm;
  LimitFacts limits;
  std::string cgroup_version;  ///< "v1", "v2", "hybrid", "" when /proc/self/cgroup is unreadable
  std::optional<bool> in_container;
  std::string container_kind;  ///< docker, kubernetes, podman, lxc, "" unknown/none
  std::optional<double> cpu_pressure_some_avg10;  ///< /proc/pressure/cpu
  std::optional<double> io_pressure_some_avg10;   ///< /proc/pressure/io
  std::optional<double> mem_pressure_some_avg10;  ///< /proc/pressure/memory
  GpuFacts gpu;                                   ///< NVML
};

}  // namespace dldoctor::system
