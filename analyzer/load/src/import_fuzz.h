// The body of the import-and-load libFuzzer targets (Kineto JSON and Nsight
// Systems exports, kineto_importer_fuzzer.cc and nsys_importer_fuzzer.cc, kept
// with the loader because they read the importer's output back): the input,
// written to a file named `input_name`, imported as `format` into a trace that
// is then loaded back, and read by its importer straight into memory (the
// loader's second source). Bad input must end in one moetrace::Error line.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_support.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/importers/import.h"

namespace moetrace::fuzz {

inline int import_and_load(const std::uint8_t* data, std::size_t size, const char* input_name,
                           importers::Format format) {
  const std::string input = write_input(input_name, data, size);
  const std::string output = scratch_path(std::string(input_name) + ".out.db");
  importers::ImportOptions options;
  options.format = format;
  try {
    importers::import_traces({input}, output, options);
  } catch (const Error& e) {
    check_error_message(e);
    return 0;
  }
  // What the importer wrote must be a trace the analyzer reads, and so must
  // the same records in memory (load_trace detects the format itself).
  for (const auto& path : {output, input}) {
    try {
      analyzer::load_trace(path);
    } catch (const Error& e) {
      check_error_message(e);
    }
  }
  return 0;
}

}  // namespace moetrace::fuzz
