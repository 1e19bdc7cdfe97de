// A stand-in for libnvidia-ml.so.1, for tests on machines without a GPU: it exports the NVML
// entry points dldoctor's reader calls, with the structs nvml.h documents, and answers from
// environment variables. It proves the reader's flow (the calls, unit conversions, error
// paths, which processes are the job's); it cannot prove the ABI matches a real driver:
// only bench/gpu_check.py on a real GPU does. Built as two libraries: fake_nvml (the _v3
// process entry point) and, with FAKE_NVML_ONLY_V1, fake_nvml_v1 (only the v1 entry point,
// as drivers before NVML 11 had).
//
//   FAKE_NVML_INIT=9        nvmlInit_v2 returns this (9: NVML_ERROR_DRIVER_NOT_LOADED)
//   FAKE_NVML_DEVICES=2     devices (default 1)
//   FAKE_NVML_UTIL=37,80    utilization % per device (the last repeats; default 37)
//   FAKE_NVML_UTIL_RC=3     nvmlDeviceGetUtilizationRates returns this (3: NOT_SUPPORTED)
//   FAKE_NVML_TOTAL_MIB, FAKE_NVML_USED_MIB    memory per device (default 16384 and 1024)
//   FAKE_NVML_PIDS=12,34    compute processes on device 0; "children": this process's
//                           children; "self": this process
//   FAKE_NVML_PROC_MIB=512  GPU memory of each listed process; "na": NVML_VALUE_NOT_AVAILABLE
//   FAKE_NVML_EXTRA_PROCS=N N more processes (pids 4000000+) on device 0
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

namespace {

struct Device {
  int index;
};
Device g_devices[16];

long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtol(v, nullptr, 10) : fallback;
}

std::vector<std::string> env_list(const char* name) {
  std::vector<std::string> out;
  const char* v = std::getenv(name);
  if (!v) return out;
  std::string s = v, cur;
  for (char c : s) {
    if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

std::vector<unsigned> listed_pids() {
  std::vector<unsigned> pids;
  for (const std::string& p : env_list("FAKE_NVML_PIDS")) {
    if (p == "self") {
      pids.push_back(unsigned(getpid()));
    } else if (p == "children") {
      if (DIR* d = opendir("/proc/self/task")) {
        while (dirent* e = readdir(d)) {
          if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
          std::ifstream f(std::string("/proc/self/task/") + e->d_name + "/children");
          unsigned child = 0;
          while (f >> child) pids.push_back(child);
        }
        closedir(d);
      }
    } else {
      pids.push_back(unsigned(std::strtoul(p.c_str(), nullptr, 10)));
    }
  }
  const long extra = env_long("FAKE_NVML_EXTRA_PROCS", 0);
  for (long i = 0; i < extra; ++i) pids.push_back(unsigned(4000000 + i));
  return pids;
}

int device_of(void* h) {
  for (int i = 0; i < 16; ++i)
    if (h == &g_devices[i]) return i;
  return -1;
}

struct Memory {
  unsigned long long total, free, used;
};
struct Utilization {
  unsigned int gpu, memory;
};
struct ProcessV1 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct ProcessV2 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};

template <class P>
int processes(void* dev, unsigned* count, P* infos) {
  if (device_of(dev) < 0 || count == nullptr) return 2;  // INVALID_ARGUMENT
  std::vector<unsigned> pids = device_of(dev) == 0 ? listed_pids() : std::vector<unsigned>{};
  if (*count < pids.size()) {
    *count = unsigned(pids.size());
    return 7;  // INSUFFICIENT_SIZE
  }
  const char* per = std::getenv("FAKE_NVML_PROC_MIB");
  const bool na = per && std::string(per) == "na";
  const unsigned long long bytes = (unsigned long long)env_long("FAKE_NVML_PROC_MIB", 512) << 20;
  for (size_t i = 0; i < pids.size(); ++i) {
    infos[i] = P{};
    infos[i].pid = pids[i];
    infos[i].usedGpuMemory = na ? ~0ULL : bytes;
  }
  *count = unsigned(pids.size());
  return 0;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) int nvmlInit_v2() {
  return int(env_long("FAKE_NVML_INIT", 0));
}
__attribute__((visibility("default"))) int nvmlShutdown() { return 0; }
__attribute__((visibility("default"))) const char* nvmlErrorString(int r) {
  switch (r) {
    case 0:
      return "Success";
    case 3:
      return "Not Supported";
    case 4:
      return "Insufficient Permissions";
    case 9:
      return "Driver Not Loaded";
    default:
      return "Unknown Error";
  }
}
__attribute__((visibility("default"))) int nvmlSystemGetDriverVersion(char* v, unsigned n) {
  std::snprintf(v, n, "%s", "999.99.fake");
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetCount_v2(unsigned* n) {
  *n = unsigned(env_long("FAKE_NVML_DEVICES", 1));
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetHandleByIndex_v2(unsigned i, void** d) {
  if (i >= 16) return 2;
  g_devices[i].index = int(i);
  *d = &g_devices[i];
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetName(void* d, char* name, unsigned n) {
  std::snprintf(name, n, "Fake GPU %d", device_of(d));
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetUUID(void* d, char* uuid, unsigned n) {
  std::snprintf(uuid, n, "GPU-fake-%d", device_of(d));
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetMemoryInfo(void* d, Memory* m) {
  if (device_of(d) < 0) return 2;
  m->total = (unsigned long long)env_long("FAKE_NVML_TOTAL_MIB", 16384) << 20;
  m->used = (unsigned long long)env_long("FAKE_NVML_USED_MIB", 1024) << 20;
  m->free = m->total - m->used;
  return 0;
}
__attribute__((visibility("default"))) int nvmlDeviceGetUtilizationRates(void* d, Utilization* u) {
  const int dev = device_of(d);
  if (dev < 0) return 2;
  if (long rc = env_long("FAKE_NVML_UTIL_RC", 0)) return int(rc);
  std::vector<std::string> utils = env_list("FAKE_NVML_UTIL");
  long value = 37;
  if (!utils.empty())
    value = std::strtol(utils[std::min<size_t>(dev, utils.size() - 1)].c_str(), nullptr, 10);
  u->gpu = unsigned(value);
  u->memory = unsigned(value / 2);
  return 0;
}
#ifndef FAKE_NVML_ONLY_V1
__attribute__((visibility("default"))) int nvmlDeviceGetComputeRunningProcesses_v3(
    void* d, unsigned* count, ProcessV2* infos) {
  return processes(d, count, infos);
}
#else
__attribute__((visibility("default"))) int nvmlDeviceGetComputeRunningProcesses(void* d,
                                                                                unsigned* count,
                                                                                ProcessV1* infos) {
  return processes(d, count, infos);
}
#endif
}
