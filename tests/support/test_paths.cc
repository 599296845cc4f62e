#include "test_paths.h"

#include <filesystem>

namespace moetrace::testing {

std::string from_bin(const char* relative) {
  namespace fs = std::filesystem;
  static const fs::path bin = fs::read_symlink("/proc/self/exe").parent_path();
  return (bin / relative).lexically_normal().string();
}

}  // namespace moetrace::testing
