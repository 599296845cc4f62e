// FLOP counts of the ops the plan builders emit, for the builders and for
// whoever models their time from the same counts (the simulator's planner
// model, sim run_spec.cc).
#pragma once

#include <cstdint>

namespace moetrace::plan {

// FLOPs (2 per multiply-add). Backward of a GEMM is two GEMMs of the same
// size (data and weight gradients), as in mpipemoe's Q vectors (Table II:
// 2 GEMMs forward, 4 backward) and pro-prophet Eq. 3.
inline double ffn_forward_flops(std::int64_t rows, std::int64_t m, std::int64_t h) {
  return 4.0 * static_cast<double>(rows) * static_cast<double>(m) * static_cast<double>(h);
}
inline double ffn_backward_flops(std::int64_t rows, std::int64_t m, std::int64_t h) {
  return 2.0 * ffn_forward_flops(rows, m, h);
}
inline double ffn_recompute_flops(std::int64_t rows, std::int64_t m, std::int64_t h) {
  return 0.5 * ffn_forward_flops(rows, m, h);
}
inline double gate_forward_flops(std::int64_t tokens, std::int64_t m, int experts) {
  return 2.0 * static_cast<double>(tokens) * static_cast<double>(m) * experts;
}
// Attention of one block per token: QKV and output projections (8 M^2) plus
// scores and context (4 S M), divided over tensor-parallel ranks.
inline double attention_forward_flops(std::int64_t tokens, std::int64_t m, std::int64_t seq,
                                      int tp) {
  return static_cast<double>(tokens) *
         (8.0 * static_cast<double>(m) * static_cast<double>(m) +
          4.0 * static_cast<double>(seq) * static_cast<double>(m)) /
         tp;
}

}  // namespace moetrace::plan
