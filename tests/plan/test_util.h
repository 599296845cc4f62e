// Shared fixtures of the plan tests: a small model, its data, the dense
// reference run, and the comparison of a CPU execution with it.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moetrace/plan/cpu_executor.h"
#include "moetrace/plan/plan.h"
#include "moetrace/plan/reference.h"
#include "moetrace/plan/validate.h"

namespace moetrace::plan::testing {

inline constexpr double kTolerance = 1e-12;

struct Fixture {
  ModelShape shape;
  ModelWeights weights;
  TrainingData data;
  ReferenceResult ref;
};

// `silent_expert` >= 0: layer 0's gate is rigged so this expert gets no token
// (a large negative logit for every input, whose first feature is shifted).
inline Fixture make_fixture(const ModelShape& shape, int iterations, const std::vector<std::int64_t>& tokens,
                            std::uint64_t seed, int silent_expert = -1) {
  Fixture f;
  f.shape = shape;
  f.weights = random_weights(shape, seed);
  f.data = random_training_data(shape, iterations, tokens, seed + 1);
  if (silent_expert >= 0) {
    Matrix& g = f.weights.layers[0].gate;
    for (std::int64_t i = 0; i < g.rows; ++i) g.at(i, silent_expert) = 0;
    g.at(0, silent_expert) = -4.0;
    for (Matrix& x : f.data.inputs)
      for (std::int64_t t = 0; t < x.rows; ++t) x.at(t, 0) = 4.0 + 0.1 * x.at(t, 0);
  }
  f.ref = reference_train(shape, f.weights, f.data);
  return f;
}

inline void expect_matches_reference(const Plan& plan, const Fixture& f,
                                     const std::vector<std::uint64_t>& seeds = {0, 17, 4242}) {
  const auto problems = check_plan(plan);
  ASSERT_TRUE(problems.empty()) << problems.front();
  for (std::uint64_t seed : seeds) {
    SCOPED_TRACE("schedule seed " + std::to_string(seed));
    CpuExecutionOptions options;
    options.schedule_seed = seed;
    const CpuExecutionResult r = execute_on_cpu(plan, f.weights, f.data, options);
    EXPECT_EQ(r.ops_executed, static_cast<std::int64_t>(plan.ops.size()));
    // Every (iteration, block) has its output and input gradient somewhere.
    std::vector<int> outputs(f.ref.outputs.size(), 0), input_grads(f.ref.input_grads.size(), 0);
    for (const auto& t : r.outputs) {
      const auto i = static_cast<std::size_t>(t.iteration * f.data.blocks + t.block);
      ++outputs[i];
      EXPECT_LE(relative_error(t.value, f.ref.outputs[i]), kTolerance)
          << "output it" << t.iteration << " block" << t.block << " rank" << t.rank.value;
    }
    for (const auto& t : r.input_grads) {
      const auto i = static_cast<std::size_t>(t.iteration * f.data.blocks + t.block);
      ++input_grads[i];
      EXPECT_LE(relative_error(t.value, f.ref.input_grads[i]), kTolerance)
          << "input grad it" << t.iteration << " block" << t.block << " rank" << t.rank.value;
    }
    for (std::size_t i = 0; i < outputs.size(); ++i) {
      EXPECT_GE(outputs[i], 1) << "no output for " << i;
      EXPECT_GE(input_grads[i], 1) << "no input gradient for " << i;
    }
    // Gradients of every parameter slice, every iteration, on every copy.
    std::size_t expert_grads = 0;
    for (const auto& g : r.grads) {
      const Matrix want = grad_slice(f.ref.grads[static_cast<std::size_t>(g.iteration)], g.slice);
      EXPECT_LE(relative_error(g.value, want), kTolerance)
          << "grad " << param_kind_name(g.slice.kind) << " layer " << g.slice.layer << " expert "
          << g.slice.expert << " it" << g.iteration << " rank " << g.rank.value;
      if (g.slice.kind == ParamKind::kExpert) ++expert_grads;
    }
    EXPECT_GE(expert_grads, static_cast<std::size_t>(f.data.iterations * f.shape.num_layers * f.shape.num_experts));
    for (const auto& p : r.final_params)
      EXPECT_LE(relative_error(p.value, param_slice(f.ref.final_weights, p.slice)), kTolerance)
          << "final " << param_kind_name(p.slice.kind) << " layer " << p.slice.layer << " expert " << p.slice.expert;
  }
}

}  // namespace moetrace::plan::testing
