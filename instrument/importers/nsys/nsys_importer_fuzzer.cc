// libFuzzer target: an Nsight Systems SQLite export (the input is the database
// file), imported into a trace that is then loaded back. Bad input must end in
// one moetrace::Error line. Seeds: tools/fuzz.sh (exports in ../shared/data
// and small hand-built ones).
#include <cstddef>
#include <cstdint>

#include "fuzz_support.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/importers/import.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moetrace;
  const std::string input = fuzz::write_input("export.sqlite", data, size);
  const std::string output = fuzz::scratch_path("nsys-out.db");
  importers::ImportOptions options;
  options.format = importers::Format::kNsys;
  try {
    importers::import_traces({input}, output, options);
  } catch (const Error& e) {
    fuzz::check_error_message(e);
    return 0;
  }
  try {
    analyzer::load_trace(output);
  } catch (const Error& e) {
    fuzz::check_error_message(e);
  }
  return 0;
}
