// Shared by the GPU tests: skip without a GPU, the reference fixtures of the
// plan tests, and the per-token routing the float64 reference chose.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>

#include "moetrace/cuda/device_probe.h"
#include "moetrace/cuda/executor.h"
#include "moetrace/plan/cpu_executor.h"
#include "moetrace/plan/reference.h"
#include "moetrace/schema/error.h"

namespace moetrace::testing {

// Empty where a GPU is usable, else why not (the probe's one line).
inline std::string no_gpu_reason() {
  try {
    cuda::probe_devices();
    return "";
  } catch (const Error& e) {
    return e.what();
  }
}

#define MOETRACE_REQUIRE_GPU()                                                   \
  do {                                                                           \
    const std::string why = ::moetrace::testing::no_gpu_reason();                \
    if (!why.empty()) GTEST_SKIP() << "needs a CUDA GPU and driver: " << why;    \
  } while (0)

struct GpuFixture {
  plan::ModelShape shape;
  plan::ModelWeights weights;
  plan::TrainingData data;
  plan::ReferenceResult ref;
};

// The bf16 value nearest to v (round to nearest even, through float as the
// executor's upload converts it), as a double.
inline double bf16_value(double v) {
  float f = static_cast<float>(v);
  std::uint32_t u = 0;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7f800000u) != 0x7f800000u) u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

inline void round_to_bf16(plan::Matrix& m) {
  for (double& v : m.data) v = bf16_value(v);
}

// The reference computes in float64 on the values the GPU holds: weights,
// inputs and output gradients drawn, then rounded to bf16 (exact in fp32
// too). What remains of the difference is the GPU's arithmetic and the
// rounding of what it stores, not the rounding of its inputs.
inline GpuFixture make_gpu_fixture(const plan::ModelShape& shape, int iterations,
                                   const std::vector<std::int64_t>& tokens, std::uint64_t seed) {
  GpuFixture f;
  f.shape = shape;
  f.weights = plan::random_weights(shape, seed);
  for (plan::LayerWeights& l : f.weights.layers) {
    round_to_bf16(l.gate);
    round_to_bf16(l.dense.w1);
    round_to_bf16(l.dense.w2);
    for (plan::ExpertWeights& e : l.experts) {
      round_to_bf16(e.w1);
      round_to_bf16(e.w2);
    }
  }
  f.data = plan::random_training_data(shape, iterations, tokens, seed + 1);
  for (plan::Matrix& m : f.data.inputs) round_to_bf16(m);
  for (plan::Matrix& m : f.data.output_grads) round_to_bf16(m);
  f.ref = plan::reference_train(shape, f.weights, f.data);
  return f;
}

// The experts the reference's gates chose for every token, by (iteration,
// layer, block): the weights of iteration j are the initial ones minus the
// learning rate times the gradients of the earlier iterations (reference.h),
// the layer inputs follow from the forward pass. bf16 runs use this as their
// planned routing: rounding must not flip a top-k choice and so change which
// tokens an expert sees, which no tolerance could absorb.
inline cuda::RoutingTable reference_routing(const GpuFixture& f) {
  cuda::RoutingTable table;
  plan::ModelWeights w = f.weights;
  for (int j = 0; j < f.data.iterations; ++j) {
    for (int b = 0; b < f.data.blocks; ++b) {
      plan::Matrix x = f.data.input(j, b);
      for (int l = 0; l < f.shape.num_layers; ++l) {
        const plan::LayerWeights& L = w.layers[static_cast<std::size_t>(l)];
        plan::MoeLayerCache cache;
        plan::Matrix y = plan::moe_layer_forward(L, f.shape.top_k, x, &cache);
        std::vector<std::int32_t>& ids = table[{j, l, b}];
        for (const auto& token : cache.experts)
          for (int e : token) ids.push_back(e);
        if (f.shape.dense_hidden > 0) {
          plan::Matrix hidden;
          x = plan::dense_ffn_forward(L.dense, y, &hidden);
        } else {
          x = std::move(y);
        }
      }
    }
    // SGD, as reference_train applies it after every iteration.
    const plan::ModelWeights& g = f.ref.grads[static_cast<std::size_t>(j)];
    plan::add_scaled(w, g, -f.shape.learning_rate);
  }
  return table;
}

}  // namespace moetrace::testing
