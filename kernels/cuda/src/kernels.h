// Launchers of the executor's own kernels (kernels.cu). Every launcher
// enqueues on `s` and checks the launch. Element types follow DType; routing
// (expert ids and weights), probabilities and gradients of parameters are fp32.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "moetrace/cuda/device_math.h"

namespace moetrace::cuda::kernels {

inline constexpr int kMaxTopK = 16;
inline constexpr int kMaxSpans = kMaxGemmGroups;

// mpipemoe/pipemoe gate (plan.h GateForward): probs = softmax(logits); the
// top_k largest (ties: lower expert) or, with `planned`, the given experts;
// routing[t] = [ids..., probs of those ids...]. counts[e] += tokens routed to e.
void gate_softmax_topk(cudaStream_t s, const float* logits, std::int64_t tokens, int experts,
                       int top_k, float* probs, float* routing, const std::int32_t* planned,
                       unsigned long long* counts);

// d(logits) = probs * (dp - <probs, dp>) with dp[e] = d_weights of the slot
// that chose e (softmax Jacobian), written as `out`.
void gate_backward_logits(cudaStream_t s, const float* probs, const float* routing,
                          const float* d_weights, std::int64_t tokens, int experts, int top_k,
                          void* d_logits, DType out);

// positions[t * k + slot]: layout row of (t, slot) or -1; inverse[row]:
// t * k + slot or -1 (rows the gate did not fill). `table` holds `listed`
// entries of layout_stride(chunks) values. Where an expert's token count
// differs from the plan's, *mismatches += 1 (if given).
void routing_maps(cudaStream_t s, const float* routing, std::int64_t tokens, int top_k,
                  const std::int64_t* table, int listed, int chunks, std::int32_t* positions,
                  std::int32_t* inverse, std::int64_t rows, unsigned long long* mismatches);

// out[row] = x[token of row] (0 for unfilled rows).
void permute_rows(cudaStream_t s, DType t, const void* x, std::int64_t cols, int top_k,
                  const std::int32_t* inverse, std::int64_t rows, void* out);
// dx[t] += sum over slots of d_permuted[positions[t, slot]].
void permute_backward(cudaStream_t s, DType t, const void* d_permuted, std::int64_t cols,
                      const std::int32_t* positions, std::int64_t tokens, int top_k, void* dx);
// y[t] = sum over slots of weight * combined[positions[t, slot]].
void unpermute(cudaStream_t s, DType t, const void* combined, const float* routing,
               const std::int32_t* positions, std::int64_t tokens, int top_k, std::int64_t cols,
               void* y);
// d_combined[row] = weight * dy[t]; d_weights[t, slot] = <dy[t], combined[row]> (0 if unrouted).
void unpermute_backward(cudaStream_t s, DType t, const void* dy, const void* combined,
                        const float* routing, const std::int32_t* positions,
                        const std::int32_t* inverse, std::int64_t tokens, int top_k,
                        std::int64_t rows, std::int64_t cols, void* d_combined, float* d_weights);

// Row spans of an FFN op: span i is rows [begin[i], begin[i] + count[i]) of
// the op's buffers and rows [prefix[i], prefix[i] + count[i]) of its
// contiguous workspace.
struct SpanBatch {
  int n = 0;
  std::int64_t begin[kMaxSpans];
  std::int64_t count[kMaxSpans];
  std::int64_t prefix[kMaxSpans];
};

// a[prefix + r] = gelu(middle[begin + r]) (exact GeLU, z Phi(z)).
void gelu_forward(cudaStream_t s, DType t, const void* middle, std::int64_t hidden,
                  const SpanBatch& spans, void* a);
// a = gelu(middle); g *= gelu'(middle), on the spans (g in workspace layout).
void gelu_backward(cudaStream_t s, DType t, const void* middle, std::int64_t hidden,
                   const SpanBatch& spans, void* a, void* g);

// dst[i] = the (first + i)-th normal of plan's SplitMix64 seeded `seed`
// (device_math.h splitmix64_normal), rounded to `t` as the host rounds it:
// random_training_data's values, drawn where they are used.
void fill_normal(cudaStream_t s, DType t, void* dst, std::int64_t n, std::uint64_t seed, std::uint64_t first);

// Attention (op_layout.h AttentionPlan): softmax of every row of `data`
// (rows x cols) in place; its backward, grad = p (grad - <grad, p>) per row.
void softmax_rows(cudaStream_t s, DType t, void* data, std::int64_t rows, std::int64_t cols);
void softmax_rows_backward(cudaStream_t s, DType t, const void* probs, void* grad, std::int64_t rows,
                           std::int64_t cols);

// Pro-Prophet's Plan search of Algorithm 1's shape on one SM: the expert
// load of a gate's routing (tokens x 2 top_k; counts: `experts` int32 of
// scratch), then the greedy loop: the heaviest device gives half the load
// of its heaviest expert not yet chosen to the lightest device, until every
// expert was chosen. Its placement is not used (the plan fixed them).
void plan_search(cudaStream_t s, const float* routing, std::int64_t tokens, int top_k, int experts, int devices,
                 int* counts);
inline constexpr int kPlanSearchMaxSlots = 6144;  // experts + devices in 48 KiB of shared memory (int64 loads)

// params -= lr * grads; grads = 0 (plan.h SgdStep).
void sgd_step(cudaStream_t s, DType t, void* params, float* grads, std::int64_t n, float lr);

// Device pointer arrays for grouped GEMMs.
struct PointerBatch {
  int n = 0;
  const void* p[3 * kMaxSpans];
};
void fill_pointers(cudaStream_t s, const PointerBatch& batch, const void** device_array);

// Emulated link: copies the segments; unpaced ones (a rank's copy to itself)
// first, then the paced ones, piece by piece, each block keeping to its
// deadlines (device_math.h). Segments are byte ranges; a segment without
// src is only paced (a sender's side of a transfer its receiver copies).
inline constexpr int kMaxSegments = 64;
struct CopySegment {
  const void* src = nullptr;
  void* dst = nullptr;
  std::int64_t bytes = 0;
  int paced = 1;
};
struct SegmentBatch {
  int n = 0;
  CopySegment seg[kMaxSegments];
};
void paced_copy(cudaStream_t s, const SegmentBatch& batch, const PaceParams& pace);

// dst[i] = sum_j srcs[j][i] (fp32 accumulation, srcs[0] may be dst), paced as
// if every source but the first came over the link.
struct SourceBatch {
  int n = 0;
  const void* src[kMaxSegments];
};
void paced_reduce(cudaStream_t s, DType t, const SourceBatch& srcs, void* dst, std::int64_t n,
                  const PaceParams& pace);

}  // namespace moetrace::cuda::kernels
