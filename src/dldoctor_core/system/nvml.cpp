// The declarations below are NVML's public ABI as nvml.h documents it (the types and the
// entry points dldoctor calls, nothing else): redeclared here so that nothing of NVIDIA's is
// needed to build, and resolved with dlsym so that a machine without the driver still runs.
#include "dldoctor_core/system/nvml.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace dldoctor::system {

namespace {

// nvml.h: `typedef struct nvmlDevice_st* nvmlDevice_t;` and `typedef enum nvmlReturn_enum
// {...} nvmlReturn_t;` (an enum of small values: int-sized).
struct nvmlDevice_st;
using nvmlDevice_t = nvmlDevice_st*;
using nvmlReturn_t = int;
constexpr nvmlReturn_t kSuccess = 0;           // NVML_SUCCESS
constexpr nvmlReturn_t kInsufficientSize = 7;  // NVML_ERROR_INSUFFICIENT_SIZE
// NVML_VALUE_NOT_AVAILABLE is (-1), stored in an unsigned long long field.
constexpr unsigned long long kValueNotAvailable = ~0ULL;
// NVML_DEVICE_NAME_V2_BUFFER_SIZE, NVML_DEVICE_UUID_V2_BUFFER_SIZE,
// NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE.
constexpr unsigned kNameBuffer = 96, kUuidBuffer = 96, kDriverBuffer = 80;

struct nvmlMemory_t {  // nvmlMemory_st (v1)
  unsigned long long total, free, used;
};
struct nvmlUtilization_t {  // nvmlUtilization_st
  unsigned int gpu, memory;
};
struct nvmlProcessInfo_v1_t {  // what nvmlDeviceGetComputeRunningProcesses (v1) fills
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct nvmlProcessInfo_v2_t {  // nvmlProcessInfo_v2_st = nvmlProcessInfo_t (_v2 and _v3)
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};

/// Processes read per call at first; NVML says how many more it has (INSUFFICIENT_SIZE).
constexpr unsigned kProcessesFirst = 32;
/// A device with more compute processes than this is listed in part.
constexpr unsigned kProcessesMax = 4096;

}  // namespace

struct Nvml::Api {
  nvmlReturn_t (*init_v2)() = nullptr;
  nvmlReturn_t (*shutdown)() = nullptr;
  const char* (*error_string)(nvmlReturn_t) = nullptr;
  nvmlReturn_t (*driver_version)(char*, unsigned) = nullptr;
  nvmlReturn_t (*count_v2)(unsigned*) = nullptr;
  nvmlReturn_t (*handle_v2)(unsigned, nvmlDevice_t*) = nullptr;
  nvmlReturn_t (*name)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*uuid)(nvmlDevice_t, char*, unsigned) = nullptr;
  nvmlReturn_t (*memory)(nvmlDevice_t, nvmlMemory_t*) = nullptr;
  nvmlReturn_t (*utilization)(nvmlDevice_t, nvmlUtilization_t*) = nullptr;
  nvmlReturn_t (*processes_v3)(nvmlDevice_t, unsigned*, nvmlProcessInfo_v2_t*) = nullptr;
  nvmlReturn_t (*processes_v2)(nvmlDevice_t, unsigned*, nvmlProcessInfo_v2_t*) = nullptr;
  nvmlReturn_t (*processes_v1)(nvmlDevice_t, unsigned*, nvmlProcessInfo_v1_t*) = nullptr;
};

namespace {

template <class F>
void bind(void* handle, F& fn, const char* symbol) {
  fn = reinterpret_cast<F>(dlsym(handle, symbol));
}

std::string from_buffer(const char* buf, size_t n) { return std::string(buf, strnlen(buf, n)); }

}  // namespace

Nvml::Nvml(const std::string& library) : library_(library) {
  dlerror();
  handle_ = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle_ == nullptr) {
    const char* why = dlerror();
    const std::string text = why ? why : "";
    if (text.find("No such file") != std::string::npos ||
        text.find("cannot open shared object") != std::string::npos)
      error_ = library + (library == kNvmlLibrary ? " not found (no NVIDIA driver on this machine)"
                                                  : " not found");
    else
      error_ = library + " could not be loaded: " + text;
    return;
  }
  api_ = new Api;
  bind(handle_, api_->init_v2, "nvmlInit_v2");
  bind(handle_, api_->shutdown, "nvmlShutdown");
  bind(handle_, api_->error_string, "nvmlErrorString");
  bind(handle_, api_->driver_version, "nvmlSystemGetDriverVersion");
  bind(handle_, api_->count_v2, "nvmlDeviceGetCount_v2");
  bind(handle_, api_->handle_v2, "nvmlDeviceGetHandleByIndex_v2");
  bind(handle_, api_->name, "nvmlDeviceGetName");
  bind(handle_, api_->uuid, "nvmlDeviceGetUUID");
  bind(handle_, api_->memory, "nvmlDeviceGetMemoryInfo");
  bind(handle_, api_->utilization, "nvmlDeviceGetUtilizationRates");
  bind(handle_, api_->processes_v3, "nvmlDeviceGetComputeRunningProcesses_v3");
  bind(handle_, api_->processes_v2, "nvmlDeviceGetComputeRunningProcesses_v2");
  bind(handle_, api_->processes_v1, "nvmlDeviceGetComputeRunningProcesses");
  // The three without which no device can be read; the rest only leave a figure unknown.
  for (auto [fn, name] :
       {std::pair<const void*, const char*>{(const void*)api_->init_v2, "nvmlInit_v2"},
        {(const void*)api_->count_v2, "nvmlDeviceGetCount_v2"},
        {(const void*)api_->handle_v2, "nvmlDeviceGetHandleByIndex_v2"}}) {
    if (fn == nullptr) {
      error_ = library + " lacks " + name + " (not NVML, or a driver older than NVML 5.319)";
      return;
    }
  }
  if (const nvmlReturn_t r = api_->init_v2(); r != kSuccess) {
    error_ = "nvmlInit_v2: " + error_text(r);
    return;
  }
  initialised_ = true;
  unsigned count = 0;
  if (const nvmlReturn_t r = api_->count_v2(&count); r != kSuccess) {
    error_ = "nvmlDeviceGetCount_v2: " + error_text(r);
    return;
  }
  for (unsigned i = 0; i < count && i < 1024; ++i) {
    nvmlDevice_t dev = nullptr;
    if (const nvmlReturn_t r = api_->handle_v2(i, &dev); r != kSuccess || dev == nullptr) {
      // A device the container may not use, or one that fell off the bus: the others count.
      device_errors_.push_back("GPU " + std::to_string(i) + ": " + error_text(r));
      continue;
    }
    devices_.push_back(dev);
    indices_.push_back(int(i));
  }
  ok_ = true;
}

Nvml::~Nvml() {
  if (initialised_ && api_ && api_->shutdown) api_->shutdown();
  delete api_;
  if (handle_) dlclose(handle_);
}

const Nvml& Nvml::shared() {
  static const Nvml* instance = [] {  // never deleted: see the header
    const char* env = std::getenv(kNvmlLibraryEnv);
    return new Nvml(env && *env ? env : kNvmlLibrary);
  }();
  return *instance;
}

std::string Nvml::error_text(int code) const {
  if (api_ && api_->error_string) {
    if (const char* s = api_->error_string(code); s && *s) return s;
  }
  return "NVML error " + std::to_string(code);
}

namespace {
template <class T>
NvmlResult<T> failed(std::string why) {
  NvmlResult<T> r;
  r.error = std::move(why);
  return r;
}
}  // namespace

NvmlResult<std::string> Nvml::driver_version() const {
  if (!ok_ || !api_->driver_version) return failed<std::string>("not available");
  char buf[kDriverBuffer] = {};
  if (const nvmlReturn_t r = api_->driver_version(buf, kDriverBuffer); r != kSuccess)
    return failed<std::string>(error_text(r));
  return {from_buffer(buf, sizeof buf), ""};
}

NvmlResult<std::string> Nvml::name(int device) const {
  if (!ok_ || device < 0 || device >= device_count() || !api_->name)
    return failed<std::string>("not available");
  char buf[kNameBuffer] = {};
  if (const nvmlReturn_t r = api_->name(nvmlDevice_t(devices_[size_t(device)]), buf, kNameBuffer);
      r != kSuccess)
    return failed<std::string>(error_text(r));
  return {from_buffer(buf, sizeof buf), ""};
}

NvmlResult<std::string> Nvml::uuid(int device) const {
  if (!ok_ || device < 0 || device >= device_count() || !api_->uuid)
    return failed<std::string>("not available");
  char buf[kUuidBuffer] = {};
  if (const nvmlReturn_t r = api_->uuid(nvmlDevice_t(devices_[size_t(device)]), buf, kUuidBuffer);
      r != kSuccess)
    return failed<std::string>(error_text(r));
  return {from_buffer(buf, sizeof buf), ""};
}

NvmlResult<NvmlMemory> Nvml::memory(int device) const {
  if (!ok_ || device < 0 || device >= device_count() || !api_->memory)
    return failed<NvmlMemory>("not available");
  nvmlMemory_t m{};
  if (const nvmlReturn_t r = api_->memory(nvmlDevice_t(devices_[size_t(device)]), &m);
      r != kSuccess)
    return failed<NvmlMemory>(error_text(r));
  if (m.total == 0 || m.total == kValueNotAvailable) return failed<NvmlMemory>("no total");
  return {NvmlMemory{int64_t(m.total), int64_t(m.free), int64_t(m.used)}, ""};
}

NvmlResult<int> Nvml::utilization(int device) const {
  if (!ok_ || device < 0 || device >= device_count() || !api_->utilization)
    return failed<int>("not available");
  nvmlUtilization_t u{};
  if (const nvmlReturn_t r = api_->utilization(nvmlDevice_t(devices_[size_t(device)]), &u);
      r != kSuccess)
    return failed<int>(error_text(r));
  if (u.gpu > 100) return failed<int>("out of range");  // NVML_VALUE_NOT_AVAILABLE and the like
  return {int(u.gpu), ""};
}

NvmlResult<std::vector<NvmlProcess>> Nvml::compute_processes(int device) const {
  using Out = std::vector<NvmlProcess>;
  if (!ok_ || device < 0 || device >= device_count()) return failed<Out>("not available");
  const nvmlDevice_t dev = nvmlDevice_t(devices_[size_t(device)]);
  auto used = [](unsigned long long b) {
    return b == kValueNotAvailable ? std::nullopt : std::optional<int64_t>(int64_t(b));
  };
  // The call fills at most `count` entries and says how many it has when that was too few.
  auto read = [&](auto fn, auto sample) -> NvmlResult<Out> {
    using Info = decltype(sample);
    unsigned capacity = kProcessesFirst;
    for (int attempt = 0; attempt < 4; ++attempt) {
      std::vector<Info> buf(capacity);
      unsigned count = capacity;
      const nvmlReturn_t r = fn(dev, &count, buf.data());
      if (r == kInsufficientSize && count > capacity && capacity < kProcessesMax) {
        capacity = std::min(kProcessesMax, count + 8);  // processes come and go between calls
        continue;
      }
      if (r != kSuccess && r != kInsufficientSize) return failed<Out>(error_text(r));
      Out out;
      for (unsigned i = 0; i < std::min(count, capacity); ++i)
        out.push_back(NvmlProcess{int(buf[i].pid), used(buf[i].usedGpuMemory)});
      return {std::move(out), ""};
    }
    return failed<Out>("the process list kept growing");
  };
  if (api_->processes_v3) return read(api_->processes_v3, nvmlProcessInfo_v2_t{});
  if (api_->processes_v2) return read(api_->processes_v2, nvmlProcessInfo_v2_t{});
  if (api_->processes_v1) return read(api_->processes_v1, nvmlProcessInfo_v1_t{});
  return failed<Out>("not available");
}

}  // namespace dldoctor::system
