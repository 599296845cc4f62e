// Host-side element conversion to and from the device types (bf16 rounding
// to nearest even, as the device's __float2bfloat16_rn). No CUDA here:
// unit-tested anywhere. (Parameter values come from plan::param_slice.)
#pragma once

#include <cstdint>

#include "moetrace/cuda/op_layout.h"

namespace moetrace::cuda {

std::uint16_t bf16_bits(float f);
float bf16_value(std::uint16_t bits);

// n elements from float64 to `t` at dst, and back.
void to_device_type(const double* src, std::int64_t n, DType t, void* dst);
void from_device_type(const void* src, std::int64_t n, DType t, double* dst);

}  // namespace moetrace::cuda
