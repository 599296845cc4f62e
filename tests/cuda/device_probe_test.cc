// Runs everywhere: with a GPU the probe lists it; without one (CI) it throws
// the one line the CLI prints.
#include <gtest/gtest.h>

#include "moetrace/cuda/device_probe.h"
#include "moetrace/schema/error.h"

namespace moetrace::cuda {
namespace {

TEST(DeviceProbe, ListsDevicesOrSaysWhyNot) {
  try {
    const auto devices = probe_devices();
    ASSERT_FALSE(devices.empty());
    EXPECT_FALSE(devices[0].name.empty());
    EXPECT_GT(devices[0].sm_count, 0);
    EXPECT_TRUE(gpu_available());
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_TRUE(m.rfind("no NVIDIA driver (", 0) == 0 || m.rfind("no CUDA GPU found (", 0) == 0 ||
                m.rfind("the NVIDIA driver does not match", 0) == 0 || m.rfind("CUDA is not usable (", 0) == 0)
        << m;
    EXPECT_EQ(m.find('\n'), std::string::npos);
    EXPECT_FALSE(gpu_available());
  }
}

}  // namespace
}  // namespace moetrace::cuda
