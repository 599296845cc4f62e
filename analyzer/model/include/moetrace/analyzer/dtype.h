// Element sizes by dtype name, as traces and model files spell them
// (PyTorch's "BFloat16", "c10::Half", "torch.float16"; Kineto's NCCL "Float";
// Hugging Face's "bfloat16"; short forms "bf16", "fp8"). Any case.
#pragma once

#include <optional>
#include <string_view>

namespace moetrace::analyzer {

// Bytes of one element; nullopt where the name is unknown.
std::optional<int> dtype_bytes(std::string_view dtype);

}  // namespace moetrace::analyzer
