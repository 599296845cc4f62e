// libFuzzer target: a run configuration (`moetrace run -c FILE`). Bad input
// must end in one moetrace::ConfigError line naming the field; a spec that
// parses must write itself as JSON.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "moetrace/sim/run_spec.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moetrace;
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    const auto spec = sim::run_spec_from_json(json);
    (void)spec.to_json();
  } catch (const Error& e) {
    fuzz::check_error_message(e);
  }
  return 0;
}
