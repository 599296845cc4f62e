// libFuzzer target: an Nsight Systems SQLite export (the input is the database
// file), imported into a trace that is then loaded back. Bad input must end in
// one moetrace::Error line. Seeds: tools/fuzz.sh (exports in ../shared/data
// and small hand-built ones).
#include <cstddef>
#include <cstdint>

#include "import_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return moetrace::fuzz::import_and_load(data, size, "export.sqlite", moetrace::importers::Format::kNsys);
}
