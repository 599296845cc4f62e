// Paths the tests read: the source tree, ../shared/data, the `moetrace`
// executable, the committed GPU traces. The build gives each as a path
// relative to the directory of the test executables (MOETRACE_*_FROM_BIN,
// tests/CMakeLists.txt), resolved here when a test runs: no absolute path is
// compiled into a test, so a clone in another folder compiles the same
// units and hits the same compiler cache.
#pragma once

#include <string>

namespace moetrace::testing {

// `relative`, resolved against the directory of the running executable.
std::string from_bin(const char* relative);

}  // namespace moetrace::testing

#define MOETRACE_SOURCE_DIR ::moetrace::testing::from_bin(MOETRACE_SOURCE_DIR_FROM_BIN)
#define MOETRACE_SHARED_DATA ::moetrace::testing::from_bin(MOETRACE_SHARED_DATA_FROM_BIN)
#define MOETRACE_CLI ::moetrace::testing::from_bin(MOETRACE_CLI_FROM_BIN)
#define MOETRACE_GPU_FIXTURES_DIR ::moetrace::testing::from_bin(MOETRACE_GPU_FIXTURES_FROM_BIN)
