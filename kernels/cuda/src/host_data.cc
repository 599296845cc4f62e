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

plan::Matrix param_slice_values(const plan::ModelWeights& w, const plan::ParamSlice& s,
                                std::int64_t rows) {
  if (s.layer < 0 || static_cast<std::size_t>(s.layer) >= w.layers.size())
    throw Error(fmt::format("parameter slice of layer {}: the model has {} layers", s.layer,
                            w.layers.size()));
  const plan::LayerWeights& L = w.layers[static_cast<std::size_t>(s.layer)];
  plan::Matrix out = plan::Matrix::zeros(rows, s.cols);
  auto check_cols = [&](std::int64_t have) {
    if (s.col_begin < 0 || s.col_begin + s.cols > have)
      throw Error(fmt::format("parameter slice columns [{}, {}) of layer {}: the weight has {}",
                              s.col_begin, s.col_begin + s.cols, s.layer, have));
  };
  if (s.kind == plan::ParamKind::kGate) {
    check_cols(L.gate.cols);
    if (rows != L.gate.rows)
      throw Error(fmt::format("gate slice of layer {} has {} rows, W_g has {}", s.layer, rows, L.gate.rows));
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < s.cols; ++c) out.at(r, c) = L.gate.at(r, s.col_begin + c);
    return out;
  }
  const plan::ExpertWeights* e = nullptr;
  if (s.kind == plan::ParamKind::kExpert) {
    if (s.expert < 0 || static_cast<std::size_t>(s.expert) >= L.experts.size())
      throw Error(fmt::format("expert {} of layer {}: the layer has {} experts", s.expert, s.layer,
                              L.experts.size()));
    e = &L.experts[static_cast<std::size_t>(s.expert)];
  } else {
    e = &L.dense;
  }
  const std::int64_t M = e->w1.rows;
  check_cols(e->w1.cols);
  if (rows != 2 * M)
    throw Error(fmt::format("FFN slice of layer {} has {} rows, expected 2 x {}", s.layer, rows, M));
  for (std::int64_t r = 0; r < M; ++r)
    for (std::int64_t c = 0; c < s.cols; ++c) {
      out.at(r, c) = e->w1.at(r, s.col_begin + c);
      out.at(M + r, c) = e->w2.at(s.col_begin + c, r);  // W2^T
    }
  return out;
}

}  // namespace moetrace::cuda
