// The float64 CPU reference of the model: MoE layers (gating GEMM, softmax,
// top-k, two-layer GeLU FFN per expert, weighted combine) and the blocks'
// dense FFNs, forward and backward, on a whole block of tokens at once and
// one token at a time, with no parallelism, no permutation and no
// communication. Every variant's plan, run by the CPU executor, must match it.
//
// Conventions (shared with the executors, see plan.h):
//  - gate: probs = softmax(x W_g); the top_k largest probabilities (ties: the
//    lower expert index) select the experts; their weights are the
//    probabilities themselves, not renormalised (Switch/GShard style;
//    interpretation: the papers leave the normalisation open).
//  - expert e: y = gelu(x W1_e) W2_e with the exact gelu(z) = z Phi(z); no
//    biases. The dense FFN of a block has the same form with A, B.
//  - no capacity limit: every routed token is computed (the papers' plans
//    drop none either; capacity padding is a GShard/Tutel detail).
//  - a block is MoE layer then dense FFN (if dense_hidden > 0); the plans'
//    attention ops are timing only and carry no math here either; the model
//    output is the last block's output; the loss is sum(output * output_grad)
//    so the given output_grad is d(loss)/d(output).
#pragma once

#include <cstdint>
#include <vector>

#include "moetrace/plan/config.h"
#include "moetrace/plan/routing.h"

namespace moetrace::plan {

struct Matrix {
  std::int64_t rows = 0;
  std::int64_t cols = 0;
  std::vector<double> data;  // row-major

  static Matrix zeros(std::int64_t rows, std::int64_t cols);
  double& at(std::int64_t r, std::int64_t c) { return data[static_cast<std::size_t>(r * cols + c)]; }
  double at(std::int64_t r, std::int64_t c) const {
    return data[static_cast<std::size_t>(r * cols + c)];
  }
  const double* row(std::int64_t r) const { return data.data() + r * cols; }
  double* row(std::int64_t r) { return data.data() + r * cols; }
};

struct ExpertWeights {
  Matrix w1;  // model_dim x hidden
  Matrix w2;  // hidden x model_dim
};

struct LayerWeights {
  Matrix gate;                        // model_dim x num_experts
  std::vector<ExpertWeights> experts;
  ExpertWeights dense;                // empty matrices where dense_hidden == 0
};

struct ModelWeights {
  std::vector<LayerWeights> layers;
};

// Seeded random weights, scaled so activations stay of order one through the
// layers and the softmax is far from uniform.
ModelWeights random_weights(const ModelShape& shape, std::uint64_t seed);
ModelWeights zero_like(const ModelWeights& w);
// w += scale g for every parameter (an SGD step is scale = -learning rate).
void add_scaled(ModelWeights& w, const ModelWeights& g, double scale);

// Inputs and output gradients of every (iteration, block).
struct TrainingData {
  int iterations = 0;
  int blocks = 0;
  std::vector<Matrix> inputs;        // [iteration * blocks + block]: tokens x model_dim
  std::vector<Matrix> output_grads;  // same shape

  const Matrix& input(int iteration, int block) const {
    return inputs[static_cast<std::size_t>(iteration * blocks + block)];
  }
  const Matrix& output_grad(int iteration, int block) const {
    return output_grads[static_cast<std::size_t>(iteration * blocks + block)];
  }
};

// tokens[b] tokens in block b (the same in every iteration).
TrainingData random_training_data(const ModelShape& shape, int iterations,
                         const std::vector<std::int64_t>& tokens, std::uint64_t seed);

double gelu(double z);
double gelu_grad(double z);

// One MoE layer on a block of tokens, kept for its backward pass.
struct MoeLayerCache {
  Matrix x;
  Matrix probs;                         // tokens x E
  std::vector<std::vector<int>> experts;     // [token]: top_k expert ids
  std::vector<std::vector<double>> weights;  // [token]: their weights
  std::vector<std::vector<std::vector<double>>> hidden;  // [token][slot]: pre-activation (H)
  std::vector<std::vector<std::vector<double>>> out;     // [token][slot]: expert output (M)
};

Matrix moe_layer_forward(const LayerWeights& w, int top_k, const Matrix& x, MoeLayerCache* cache);
// Returns dx; adds the gradients into `grad` (same shapes as the weights).
Matrix moe_layer_backward(const LayerWeights& w, const MoeLayerCache& cache, const Matrix& dy,
                          LayerWeights& grad);

Matrix dense_ffn_forward(const ExpertWeights& w, const Matrix& x, Matrix* hidden);
Matrix dense_ffn_backward(const ExpertWeights& w, const Matrix& x, const Matrix& hidden,
                          const Matrix& dy, ExpertWeights& grad);

// The model's forward and backward pass on every block of every iteration,
// with an SGD step (learning_rate) after each iteration.
struct ReferenceResult {
  std::vector<Matrix> outputs;      // [iteration * blocks + block]
  std::vector<Matrix> input_grads;  // [iteration * blocks + block]
  std::vector<ModelWeights> grads;  // [iteration]: summed over blocks, before the step
  ModelWeights final_weights;
  ExpertLoad load;                  // the routing the gates chose (sources = blocks)
};

ReferenceResult reference_train(const ModelShape& shape, const ModelWeights& initial,
                                const TrainingData& data);

// Max-norm relative error ||a - b||_inf / ||b||_inf (absolute where b is 0);
// infinity where the shapes differ or a value is not finite.
double relative_error(const Matrix& a, const Matrix& b);

}  // namespace moetrace::plan
