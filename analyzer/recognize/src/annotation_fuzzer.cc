// libFuzzer target: the MoE annotation convention parser
// ("moetrace:<kind> key=value", docs/annotations.md) on any range name. The
// first byte picks the NVTX domain (bit 0: "moetrace", else bit 1: "NCCL",
// else none); the rest is the name. It returns a verdict; it never throws or
// crashes, and a malformed name always says why.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "moetrace/analyzer/moe_recognition.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace moetrace::analyzer;
  if (size == 0) return 0;
  const std::string_view domain = (data[0] & 1) ? "moetrace" : (data[0] & 2) ? "NCCL" : "";
  // The name in a buffer of its own size, so ASan sees any read past it.
  const std::string name(reinterpret_cast<const char*>(data) + 1, size - 1);
  Annotation a;
  std::string why;
  const auto verdict = parse_annotation(domain, name, a, &why);
  if (verdict == AnnotationParse::kMalformed && why.empty()) __builtin_trap();
  return 0;
}
