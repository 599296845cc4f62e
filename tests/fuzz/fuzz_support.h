// Shared by the libFuzzer targets (`*_fuzzer.cc` beside the readers; the
// `fuzz` preset): the input as a file, for readers that take a path, and the
// one outcome besides success that a reader may have on bad input.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "moetrace/schema/error.h"

namespace moetrace::fuzz {

// A path unique to this process (libFuzzer's -jobs run several), in /dev/shm
// where there is one: a reader of files gets a real file, at memory speed.
inline std::string scratch_path(std::string_view name) {
  static const std::string dir = [] {
    std::filesystem::path base = std::filesystem::exists("/dev/shm") ? "/dev/shm" : std::filesystem::temp_directory_path();
    auto d = base / ("moetrace-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d.string();
  }();
  return dir + "/" + std::string(name);
}

inline std::string write_input(std::string_view name, const std::uint8_t* data, std::size_t size) {
  const std::string path = scratch_path(name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) std::abort();
  return path;
}

// A moetrace::Error is the expected answer to bad input; it must be the one
// non-empty line the command-line tool prints. Anything else escaping a reader
// (another exception, a crash, a sanitizer report) is a finding.
inline void check_error_message(const Error& e) {
  const std::string_view what = e.what();
  if (what.empty() || what.find('\n') != std::string_view::npos) {
    std::fprintf(stderr, "moetrace::Error is not one line: [%s]\n", e.what());
    std::abort();
  }
}

}  // namespace moetrace::fuzz
