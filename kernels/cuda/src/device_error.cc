#include <fmt/format.h>

#include "moetrace/cuda/device_probe.h"

namespace moetrace::cuda {

std::string describe_device_error(int code, std::string_view name, std::string_view text) {
  // cudaErrorInsufficientDriver (35): no driver, or one older than the
  // runtime; cudaErrorNoDevice (100): a driver but no visible GPU
  // (CUDA_VISIBLE_DEVICES may hide them); cudaErrorSystemDriverMismatch (803)
  // and cudaErrorCompatNotSupportedOnDevice (804): a broken driver install.
  const char* what = "CUDA is not usable";
  if (code == 35) what = "no NVIDIA driver";
  else if (code == 100) what = "no CUDA GPU found";
  else if (code == 803 || code == 804) what = "the NVIDIA driver does not match the CUDA runtime";
  return fmt::format("{} ({}: {})", what, name, text);
}

}  // namespace moetrace::cuda
