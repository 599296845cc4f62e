// Host-side element conversion to and from the device types (bf16 rounding
// to nearest even, as the device's __float2bfloat16_rn). No CUDA here:
// unit-tested anywhere. (Parameter values come from plan::param_slice.)
#pragma once

#include <cstdint>
#include <vector>

#include "moetrace/cuda/op_layout.h"

namespace moetrace::cuda {

std::uint16_t bf16_bits(float f);
float bf16_value(std::uint16_t bits);

// n elements from float64 to `t` at dst, and back.
void to_device_type(const double* src, std::int64_t n, DType t, void* dst);
void from_device_type(const void* src, std::int64_t n, DType t, double* dst);

// plan::random_training_data(shape, iterations, tokens, seed) described, not
// made: the executor draws each model input and output gradient on the
// device when its buffer is allocated (splitmix64_normal), so the host
// holds none of them. Made up front, a 64-rank preset's float64 inputs and
// their pinned copies took tens of GB of host memory.
struct RandomTrainingData {
  int iterations = 0;
  std::vector<std::int64_t> tokens;  // per block, the same every iteration
  std::int64_t model_dim = 0;
  std::uint64_t seed = 0;
};

// Index of the first normal of the (iteration, block) input or output
// gradient in random_training_data's sequence: every input, iteration-major,
// then every output gradient. Throws moetrace::Error out of range.
std::uint64_t training_normal_offset(const RandomTrainingData& d, bool output_grad, int iteration, int block);

}  // namespace moetrace::cuda
