// libFuzzer target: a user's MoE recognition rules file (--moe-rules FILE).
// Bad input (invalid JSON, a document the schema refuses, a pattern that does
// not compile) must end in one moetrace::Error line naming the rule.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_support.h"
#include "moetrace/analyzer/moe_recognition.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moetrace;
  // std::regex compiles patterns recursively; a pattern of a few kilobytes of
  // nested groups overflows the stack in libstdc++ itself. Rule files are
  // written by people; the schema caps nothing, so keep inputs small.
  if (size > 4096) return 0;
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  try {
    const auto rules = analyzer::parse_moe_rules(json, "rules.json");
    // The compiled rules must match names without crashing.
    for (const auto& r : rules.ranges) {
      std::smatch m;
      const std::string name = "nn.Module: MoELayer_3";
      (void)std::regex_search(name, m, r.regex());
    }
  } catch (const Error& e) {
    fuzz::check_error_message(e);
  }
  return 0;
}
