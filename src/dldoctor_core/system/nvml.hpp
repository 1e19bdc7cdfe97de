// NVIDIA's management library (NVML), opened at run time with dlopen("libnvidia-ml.so.1"):
// no build or wheel dependency, and a machine without the driver just has no GPU to measure.
// Only the few entry points dldoctor reads are declared, with NVML's documented ABI (nvml.h,
// API version 11 and later: the versioned _v2/_v3 entry points where they exist). Every
// failure (no library, a missing symbol, an NVML error) is a reason why the GPU was not
// measured, never an exception and never a 0.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dldoctor::system {

/// The library dlopen looks for: the driver installs it (the unversioned .so comes with the
/// CUDA toolkit's development files only).
inline constexpr const char* kNvmlLibrary = "libnvidia-ml.so.1";
/// Environment variable naming another library to open instead: a driver's library outside
/// dlopen's search path, or the tests' stand-in (tests/cpp/support/fake_nvml.cpp).
inline constexpr const char* kNvmlLibraryEnv = "DLDOCTOR_NVML_LIBRARY";

/// One compute process on a device (nvmlProcessInfo_t).
struct NvmlProcess {
  int pid = 0;
  std::optional<int64_t> used_bytes;  ///< empty: NVML_VALUE_NOT_AVAILABLE (WDDM, some vGPUs)
};

/// An NVML call's outcome: the value, or why there is none.
template <class T>
struct NvmlResult {
  std::optional<T> value;
  std::string error;  ///< "" on success: NVML's own text ("Not Supported", ...) otherwise
  explicit operator bool() const noexcept { return value.has_value(); }
};

/// Memory of a device (nvmlMemory_t), bytes.
struct NvmlMemory {
  int64_t total = 0, free = 0, used = 0;
};

/// The loaded library with NVML initialised, or the reason it is not. Immutable once built;
/// NVML itself is thread-safe, so one instance serves every thread.
class Nvml {
 public:
  /// Opens `library` (a name dlopen searches for, or a path) and calls nvmlInit_v2. Never
  /// throws: a failure leaves ok() false with the reason.
  explicit Nvml(const std::string& library = kNvmlLibrary);
  ~Nvml();  ///< nvmlShutdown (NVML counts its initialisations) and dlclose
  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  /// The process-wide instance of the driver's library (or $DLDOCTOR_NVML_LIBRARY's), opened
  /// on the first call (nvmlInit can take a second on a machine of many GPUs without
  /// persistence mode) and never closed: a sampler thread may still read through it while
  /// the process exits.
  static const Nvml& shared();

  bool ok() const noexcept { return ok_; }
  /// Why NVML cannot be used ("" when ok()): "libnvidia-ml.so.1 not found (no NVIDIA
  /// driver)", "... lacks nvmlInit_v2", "nvmlInit_v2: Driver Not Loaded".
  const std::string& error() const noexcept { return error_; }
  const std::string& library() const noexcept { return library_; }

  /// Devices NVML sees (all of the machine's: NVML ignores CUDA_VISIBLE_DEVICES).
  int device_count() const noexcept { return int(devices_.size()); }
  /// Why a device could not be opened (it is then skipped in device_count()), in order.
  const std::vector<std::string>& device_errors() const noexcept { return device_errors_; }

  NvmlResult<std::string> driver_version() const;
  NvmlResult<std::string> name(int device) const;
  NvmlResult<std::string> uuid(int device) const;
  NvmlResult<NvmlMemory> memory(int device) const;
  /// % of the last sample period (1/6 s to 1 s, by product) during which a kernel ran: not
  /// how busy the GPU's multiprocessors were. NOT_SUPPORTED on MIG-enabled GPUs.
  NvmlResult<int> utilization(int device) const;
  /// Processes with a compute context on the device (the _v3, else _v2, else v1 entry point).
  NvmlResult<std::vector<NvmlProcess>> compute_processes(int device) const;
  /// The NVML index of the device (what nvidia-smi numbers it), for device(i).
  int index(int device) const noexcept {
    return device >= 0 && device < device_count() ? indices_[size_t(device)] : -1;
  }

 private:
  struct Api;
  std::string error_text(int code) const;
  void* handle_ = nullptr;
  Api* api_ = nullptr;
  bool ok_ = false;
  bool initialised_ = false;
  std::string error_;
  std::string library_;
  std::vector<void*> devices_;  // nvmlDevice_t handles of the devices that opened
  std::vector<int> indices_;    // their NVML indices
  std::vector<std::string> device_errors_;
};

}  // namespace dldoctor::system
