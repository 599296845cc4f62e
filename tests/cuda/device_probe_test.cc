// Runs everywhere: with a GPU the probe lists it; without one (CI) it throws
// the one line the CLI prints.
#include <gtest/gtest.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "moetrace/cuda/device_probe.h"
#include "moetrace/cuda/executor.h"
#include "moetrace/cupti/collector.h"
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

namespace moetrace::cuda {
namespace {

TEST(ExecutorOptions, CommunicatorAndPrecisionNames) {
  EXPECT_EQ(parse_communicator("nccl"), CommunicatorKind::kNccl);
  EXPECT_EQ(parse_communicator("emulated"), CommunicatorKind::kEmulated);
  EXPECT_STREQ(communicator_name(CommunicatorKind::kNccl), "nccl");
  try {
    parse_communicator("mpi");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "communicator (mpi) must be emulated or nccl");
  }
}

// Without a GPU the collector refuses to start with an error (no crash);
// with one it records an (empty) run and closes the trace.
TEST(Collector, StartsOrFailsCleanly) {
  const std::string path =
      (std::filesystem::temp_directory_path() / "moetrace_collector_probe_test.db").string();
  instrument::RunRecord run;
  run.name = "collector probe";
  run.backend = "cuda";
  try {
    cupti::Collector c(std::make_unique<instrument::TraceWriter>(path, run));
    EXPECT_EQ(cupti::Collector::active(), &c);
    c.close();
    EXPECT_EQ(cupti::Collector::active(), nullptr);
  } catch (const Error& e) {
    std::cerr << "note: the collector did not start: " << e.what() << "\n";
    EXPECT_FALSE(std::string(e.what()).empty());
    EXPECT_EQ(cupti::Collector::active(), nullptr);
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace moetrace::cuda
