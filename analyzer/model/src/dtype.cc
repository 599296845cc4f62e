#include "moetrace/analyzer/dtype.h"

#include <string>

#include "moetrace/schema/ascii.h"

namespace moetrace::analyzer {

std::optional<int> dtype_bytes(std::string_view dtype) {
  std::string d = to_ascii_lower(dtype);
  if (d.starts_with("torch.")) d = d.substr(6);
  if (d == "float" || d == "float32" || d == "fp32" || d == "int" || d == "int32") return 4;
  if (d == "half" || d == "float16" || d == "fp16" || d == "bfloat16" || d == "bf16" || d == "short" ||
      d == "int16")
    return 2;
  if (d == "double" || d == "float64" || d == "long" || d == "int64") return 8;
  if (d == "byte" || d == "char" || d == "uint8" || d == "int8" || d == "bool" || d.starts_with("float8") ||
      d == "fp8")
    return 1;
  return std::nullopt;
}

}  // namespace moetrace::analyzer
