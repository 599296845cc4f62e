// Tests that read third-party traces under ../shared/data (MOETRACE_SHARED_DATA):
// the only checks against traces moetrace did not make. Where a file is
// absent the test is skipped, and the skip says so; where the environment
// sets MOETRACE_REQUIRE_SHARED_DATA=1 (.ci/run does) it fails instead, so a
// runner without the data cannot pass with those checks quietly gone.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

#include "test_paths.h"

namespace moetrace::testing {

// ../shared/data/external/<relative>.
inline std::string shared_data(const std::string& relative) {
  return std::string(MOETRACE_SHARED_DATA) + "/external/" + relative;
}

inline bool shared_data_required() {
  const char* v = std::getenv("MOETRACE_REQUIRE_SHARED_DATA");
  return v != nullptr && std::string_view(v) != "" && std::string_view(v) != "0";
}

}  // namespace moetrace::testing

// At the top of a test body: skips (or, where required, fails) the test
// when `path` is absent.
#define MOETRACE_NEED_SHARED(path)                                                                              \
  if (const std::string moetrace_shared_path_ = (path); !std::filesystem::exists(moetrace_shared_path_)) {     \
    if (::moetrace::testing::shared_data_required())                                                            \
      FAIL() << "shared data absent and MOETRACE_REQUIRE_SHARED_DATA is set: " << moetrace_shared_path_;       \
    else                                                                                                        \
      GTEST_SKIP() << "shared data absent: " << moetrace_shared_path_;                                          \
  }
