// libFuzzer target: PyTorch-profiler (Kineto) JSON, plain or gzipped (the
// importer reads both through GzipInput), imported into a trace that is then
// loaded back. Bad input must end in one moetrace::Error line.
#include <cstddef>
#include <cstdint>

#include "import_fuzz.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  return moetrace::fuzz::import_and_load(data, size, "kineto.json", moetrace::importers::Format::kKineto);
}
