// The float64 reference: hand-computed values and finite-difference checks
// of its backward pass (it anchors every executor, so it is checked on its own).
#include <gtest/gtest.h>

#include <cmath>

#include "moetrace/plan/reference.h"

namespace moetrace::plan {
namespace {

TEST(Reference, GeluAndItsDerivative) {
  // gelu(2) = 2 Phi(2), Phi(2) = 0.9772498680518208 (normal table).
  EXPECT_NEAR(gelu(2.0), 2.0 * 0.9772498680518208, 1e-15);
  EXPECT_NEAR(gelu(0.0), 0.0, 0.0);
  for (double z : {-2.5, -0.7, 0.0, 0.3, 1.9}) {
    const double h = 1e-6;
    EXPECT_NEAR(gelu_grad(z), (gelu(z + h) - gelu(z - h)) / (2 * h), 1e-8) << z;
  }
}

TEST(Reference, HandComputedTopOneLayer) {
  // M = 1, E = 2, k = 1, H = 1; x = 1; logits (0, ln 3) -> probs (1/4, 3/4);
  // expert 1: h = x w1 = 2, y = 0.75 gelu(2) w2 with w2 = 1.
  ModelShape s{.num_layers = 1, .num_experts = 2, .top_k = 1, .model_dim = 1, .expert_hidden = 1};
  ModelWeights w = random_weights(s, 1);
  auto& l = w.layers[0];
  l.gate.at(0, 0) = 0.0;
  l.gate.at(0, 1) = std::log(3.0);
  l.experts[1].w1.at(0, 0) = 2.0;
  l.experts[1].w2.at(0, 0) = 1.0;
  Matrix x = Matrix::zeros(1, 1);
  x.at(0, 0) = 1.0;
  MoeLayerCache cache;
  const Matrix y = moe_layer_forward(l, 1, x, &cache);
  EXPECT_EQ(cache.experts[0][0], 1);
  EXPECT_NEAR(cache.weights[0][0], 0.75, 1e-15);
  EXPECT_NEAR(y.at(0, 0), 0.75 * 2.0 * 0.9772498680518208, 1e-15);
}

TEST(Reference, TopKTiesGoToTheLowerExpert) {
  ModelShape s{.num_layers = 1, .num_experts = 3, .top_k = 1, .model_dim = 1, .expert_hidden = 1};
  ModelWeights w = random_weights(s, 2);
  w.layers[0].gate.at(0, 0) = 0.5;
  w.layers[0].gate.at(0, 1) = 1.0;
  w.layers[0].gate.at(0, 2) = 1.0;
  Matrix x = Matrix::zeros(1, 1);
  x.at(0, 0) = 2.0;
  MoeLayerCache cache;
  moe_layer_forward(w.layers[0], 1, x, &cache);
  EXPECT_EQ(cache.experts[0][0], 1);
}

// Loss of one iteration: sum over blocks of <output, output_grad>.
double loss(const ModelShape& s, const ModelWeights& w, const TrainingData& d) {
  const ReferenceResult r = reference_train(s, w, d);
  double sum = 0;
  for (int b = 0; b < d.blocks; ++b)
    for (std::size_t i = 0; i < r.outputs[static_cast<std::size_t>(b)].data.size(); ++i)
      sum += r.outputs[static_cast<std::size_t>(b)].data[i] * d.output_grads[static_cast<std::size_t>(b)].data[i];
  return sum;
}

TEST(Reference, BackwardMatchesFiniteDifferences) {
  ModelShape s{.num_layers = 2, .num_experts = 4, .top_k = 2, .model_dim = 5, .expert_hidden = 7, .dense_hidden = 6};
  const ModelWeights w = random_weights(s, 3);
  TrainingData d = random_training_data(s, 1, {6, 4}, 4);
  const ReferenceResult r = reference_train(s, w, d);
  const ModelWeights& g = r.grads[0];
  const double h = 1e-6;
  auto check = [&](auto select, const char* what) {
    ModelWeights plus = w, minus = w;
    select(plus) += h;
    select(minus) -= h;
    const double numeric = (loss(s, plus, d) - loss(s, minus, d)) / (2 * h);
    ModelWeights gg = g;
    const double analytic = select(gg);
    EXPECT_NEAR(analytic, numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << what;
  };
  for (int layer : {0, 1}) {
    const auto L = static_cast<std::size_t>(layer);
    check([&](ModelWeights& m) -> double& { return m.layers[L].gate.at(2, 1); }, "gate");
    check([&](ModelWeights& m) -> double& { return m.layers[L].gate.at(4, 3); }, "gate");
    for (std::size_t e = 0; e < 4; ++e) {
      check([&](ModelWeights& m) -> double& { return m.layers[L].experts[e].w1.at(1, 3); }, "w1");
      check([&](ModelWeights& m) -> double& { return m.layers[L].experts[e].w2.at(6, 2); }, "w2");
    }
    check([&](ModelWeights& m) -> double& { return m.layers[L].dense.w1.at(3, 5); }, "dense A");
    check([&](ModelWeights& m) -> double& { return m.layers[L].dense.w2.at(0, 4); }, "dense B");
  }
  for (auto [b, t, i] : {std::tuple{0, 2, 1}, std::tuple{1, 3, 4}}) {
    TrainingData plus = d, minus = d;
    plus.inputs[static_cast<std::size_t>(b)].at(t, i) += h;
    minus.inputs[static_cast<std::size_t>(b)].at(t, i) -= h;
    const double numeric = (loss(s, w, plus) - loss(s, w, minus)) / (2 * h);
    EXPECT_NEAR(r.input_grads[static_cast<std::size_t>(b)].at(t, i), numeric, 1e-6 * std::max(1.0, std::abs(numeric)));
  }
}

TEST(Reference, SgdStepBetweenIterations) {
  ModelShape s{.num_layers = 1, .num_experts = 2, .top_k = 1, .model_dim = 3, .expert_hidden = 4, .learning_rate = 0.1};
  const ModelWeights w = random_weights(s, 5);
  const TrainingData d = random_training_data(s, 2, {5}, 6);
  const ReferenceResult r = reference_train(s, w, d);
  const double expected = w.layers[0].gate.at(1, 1) - 0.1 * r.grads[0].layers[0].gate.at(1, 1) -
                          0.1 * r.grads[1].layers[0].gate.at(1, 1);
  EXPECT_NEAR(r.final_weights.layers[0].gate.at(1, 1), expected, 1e-15);
  EXPECT_NE(r.grads[0].layers[0].gate.at(1, 1), 0.0);
}

TEST(Reference, RelativeError) {
  Matrix a = Matrix::zeros(1, 2), b = Matrix::zeros(1, 2);
  b.data = {2.0, -4.0};
  a.data = {2.0, -4.0 + 4e-12};
  EXPECT_NEAR(relative_error(a, b), 1e-12, 1e-15);
  a.data[0] = std::nan("");
  EXPECT_TRUE(std::isinf(relative_error(a, b)));
}

}  // namespace
}  // namespace moetrace::plan
