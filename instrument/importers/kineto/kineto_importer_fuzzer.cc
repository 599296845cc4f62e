// libFuzzer target: PyTorch-profiler (Kineto) JSON, plain or gzipped (the
// importer reads both through GzipInput), imported into a trace that is then
// loaded back. Bad input must end in one moetrace::Error line.
#include <cstddef>
#include <cstdint>

#include "fuzz_support.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/importers/import.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moetrace;
  const std::string input = fuzz::write_input("kineto.json", data, size);
  const std::string output = fuzz::scratch_path("kineto-out.db");
  importers::ImportOptions options;
  options.format = importers::Format::kKineto;
  try {
    importers::import_traces({input}, output, options);
  } catch (const Error& e) {
    fuzz::check_error_message(e);
    return 0;
  }
  // What the importer wrote must be a trace the analyzer reads.
  try {
    analyzer::load_trace(output);
  } catch (const Error& e) {
    fuzz::check_error_message(e);
  }
  return 0;
}
