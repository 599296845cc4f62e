// libFuzzer target: a cost model (`--cost-model FILE`, and what `moetrace fit`
// writes). Bad input must end in one moetrace::ConfigError line naming the
// field; a model that parses must write JSON that reads back.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_support.h"
#include "moetrace/sim/cost_model.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moetrace;
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  std::string written;
  try {
    written = sim::to_json(sim::cost_model_from_json(json));
  } catch (const Error& e) {
    fuzz::check_error_message(e);
    return 0;
  }
  try {
    (void)sim::cost_model_from_json(written);
  } catch (const Error& e) {
    std::fprintf(stderr, "a cost model that parsed does not read back: %s\n", e.what());
    std::abort();
  }
  return 0;
}
