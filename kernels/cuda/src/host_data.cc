#include "moetrace/cuda/host_data.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "moetrace/schema/error.h"

namespace moetrace::cuda {

std::uint16_t bf16_bits(float f) {
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  if (std::isnan(f)) return static_cast<std::uint16_t>((u >> 16) | 0x40);  // keep it a quiet NaN
  const std::uint32_t rounding = 0x7FFF + ((u >> 16) & 1);
  return static_cast<std::uint16_t>((u + rounding) >> 16);
}

float bf16_value(std::uint16_t bits) {
  const std::uint32_t u = static_cast<std::uint32_t>(bits) << 16;
  float f = 0;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

void to_device_type(const double* src, std::int64_t n, DType t, void* dst) {
  if (t == DType::kFp32) {
    auto* d = static_cast<float*>(dst);
    for (std::int64_t i = 0; i < n; ++i) d[i] = static_cast<float>(src[i]);
  } else {
    auto* d = static_cast<std::uint16_t*>(dst);
    for (std::int64_t i = 0; i < n; ++i) d[i] = bf16_bits(static_cast<float>(src[i]));
  }
}

void from_device_type(const void* src, std::int64_t n, DType t, double* dst) {
  if (t == DType::kFp32) {
    const auto* s = static_cast<const float*>(src);
    for (std::int64_t i = 0; i < n; ++i) dst[i] = s[i];
  } else {
    const auto* s = static_cast<const std::uint16_t*>(src);
    for (std::int64_t i = 0; i < n; ++i) dst[i] = bf16_value(s[i]);
  }
}

std::uint64_t training_normal_offset(const RandomTrainingData& d, bool output_grad, int iteration, int block) {
  const int blocks = static_cast<int>(d.tokens.size());
  if (iteration < 0 || iteration >= d.iterations || block < 0 || block >= blocks)
    throw Error(fmt::format("training data of iteration {} block {} asked of data of {} iterations x {} blocks",
                            iteration, block, d.iterations, blocks));
  std::uint64_t per_iteration = 0, before_block = 0;
  for (int b = 0; b < blocks; ++b) {
    const auto n = static_cast<std::uint64_t>(d.tokens[static_cast<std::size_t>(b)]) *
                   static_cast<std::uint64_t>(d.model_dim);
    if (b < block) before_block += n;
    per_iteration += n;
  }
  const std::uint64_t inputs = per_iteration * static_cast<std::uint64_t>(d.iterations);
  return (output_grad ? inputs : 0) + per_iteration * static_cast<std::uint64_t>(iteration) + before_block;
}

}  // namespace moetrace::cuda
