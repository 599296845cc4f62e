// Is there a GPU to run on? One clear line where there is none, as the CLI
// prints it: "no CUDA GPU found (cudaErrorNoDevice: no CUDA-capable device is
// detected)" or "no NVIDIA driver (cudaErrorInsufficientDriver: ...)". The
// header is CUDA-free so the CLI can include it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moetrace::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  std::string uuid;
  int compute_major = 0, compute_minor = 0;
  int sm_count = 0;
  std::int64_t memory_bytes = 0;
};

// The visible devices; throws moetrace::Error with the line above where the
// CUDA runtime reports none or no driver.
std::vector<DeviceInfo> probe_devices();

// True where probe_devices() would succeed; never throws.
bool gpu_available() noexcept;

// The message for a cudaGetDeviceCount failure (pure; unit-tested).
std::string describe_device_error(int code, std::string_view name, std::string_view text);

}  // namespace moetrace::cuda
