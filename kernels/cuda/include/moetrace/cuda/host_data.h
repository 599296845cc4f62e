// Host-side data the CUDA executor moves: element conversion to and from the
// device types (bf16 rounding to nearest even, as the device does) and the
// values a parameter buffer starts with (its slice of the model's weights,
// plan.h ParamSlice). No CUDA here: unit-tested anywhere.
#pragma once

#include <cstdint>

#include "moetrace/cuda/op_layout.h"
#include "moetrace/plan/reference.h"

namespace moetrace::cuda {

std::uint16_t bf16_bits(float f);
float bf16_value(std::uint16_t bits);

// n elements from float64 to `t` at dst, and back.
void to_device_type(const double* src, std::int64_t n, DType t, void* dst);
void from_device_type(const void* src, std::int64_t n, DType t, double* dst);

// rows x s.cols values of a parameter slice: the gate's W_g columns, or the
// stacked [W1; W2^T] columns of an expert or the dense FFN (rows = 2 M).
// Throws moetrace::Error where the slice is not in the weights.
plan::Matrix param_slice_values(const plan::ModelWeights& w, const plan::ParamSlice& s,
                                std::int64_t rows);

}  // namespace moetrace::cuda
