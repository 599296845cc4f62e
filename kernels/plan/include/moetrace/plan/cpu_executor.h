// The CPU executor of plans: runs every op's data semantics (plan.h) in
// float64 on per-rank buffers, with real data movement: permutation into
// chunks, all-to-all between rank buffers, offload to and prefetch from host
// buffers, recompute, re-communication, replica transfers and gradient
// aggregation, pipeline sends. It is the reference schedule-independent
// semantics a GPU executor must reproduce op for op.
//
// It also checks the plan while it runs: an op may only touch allocated,
// unfreed buffers of its rank; freed and uninitialised memory reads as NaN;
// the routing a gate computes must match the counts the plan was built for;
// and any order allowed by the dependencies and stream order must give the
// same result (schedule_seed picks a random one).
#pragma once

#include <cstdint>
#include <vector>

#include "moetrace/plan/plan.h"
#include "moetrace/plan/reference.h"

namespace moetrace::plan {

// The values of a parameter slice in the plan's layout (plan.h ParamSlice):
// gate: W_g; expert/dense: [W1; W2^T] restricted to the slice's columns.
Matrix param_slice(const ModelWeights& weights, const ParamSlice& slice);
// The same slice of a gradient held as ModelWeights.
inline Matrix grad_slice(const ModelWeights& grads, const ParamSlice& slice) {
  return param_slice(grads, slice);
}

struct CpuExecutionOptions {
  // 0: run ops in plan order. Otherwise give every op a random priority
  // (seeded by this) and always run the ready op (or collective) of highest
  // priority: a valid but adversarial order.
  std::uint64_t schedule_seed = 0;
};

struct BlockTensor {
  int iteration = 0;
  int block = 0;
  RankId rank;
  Matrix value;
};

struct ParamTensor {
  int iteration = -1;  // -1: final values
  RankId rank;
  ParamSlice slice;
  Matrix value;
};

struct CpuExecutionResult {
  std::vector<BlockTensor> outputs;      // every kModelOutput buffer, when freed
  std::vector<BlockTensor> input_grads;  // every kInputGrad buffer, when freed
  std::vector<ParamTensor> grads;        // gradients as each SgdStep found them
  std::vector<ParamTensor> final_params; // every kParam buffer at the end
  std::int64_t ops_executed = 0;
  std::vector<std::int64_t> peak_device_bytes;  // per rank, in the executed order
};

// Throws moetrace::Error on a plan that breaks its own rules (see above).
CpuExecutionResult execute_on_cpu(const Plan& plan, const ModelWeights& initial,
                                  const TrainingData& data, const CpuExecutionOptions& options = {});

}  // namespace moetrace::plan
