#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "moetrace/cuda/device_probe.h"
#include "moetrace/schema/error.h"

namespace moetrace::cuda {

std::vector<DeviceInfo> probe_devices() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error for later calls
    throw Error(describe_device_error(static_cast<int>(e), cudaGetErrorName(e), cudaGetErrorString(e)));
  }
  if (count == 0) throw Error("no CUDA GPU found (cudaGetDeviceCount reports 0 devices)");
  std::vector<DeviceInfo> out;
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    const cudaError_t pe = cudaGetDeviceProperties(&p, d);
    if (pe != cudaSuccess)
      throw Error(fmt::format("cannot read the properties of CUDA device {} ({}: {})", d, cudaGetErrorName(pe),
                              cudaGetErrorString(pe)));
    DeviceInfo i;
    i.index = d;
    i.name = p.name;
    std::string uuid = "GPU-";
    for (int b = 0; b < 16; ++b) {
      uuid += fmt::format("{:02x}", static_cast<unsigned char>(p.uuid.bytes[b]));
      if (b == 3 || b == 5 || b == 7 || b == 9) uuid += '-';
    }
    i.uuid = uuid;
    i.compute_major = p.major;
    i.compute_minor = p.minor;
    i.sm_count = p.multiProcessorCount;
    i.memory_bytes = static_cast<std::int64_t>(p.totalGlobalMem);
    out.push_back(std::move(i));
  }
  return out;
}

bool gpu_available() noexcept {
  try {
    return !probe_devices().empty();
  } catch (...) {
    return false;
  }
}

}  // namespace moetrace::cuda
