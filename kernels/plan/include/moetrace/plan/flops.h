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

// Bytes an expert FFN's GEMMs read and write over `rows` rows, elements of
// `elem` bytes: the memory side of a GEMM's roofline (sim cost_model.h,
// ComputeCost::gemm_seconds_per_byte). Each GEMM reads its two operands and
// writes its result once; an expert without rows moves nothing (a grouped
// or batched GEMM skips it, a loop does not launch it).
//  forward (2 GEMMs): W1 and W2 (2 M H), the input and the output (2 rows
//    M), the middle written and read (2 rows H);
//  backward (4 GEMMs, mpipemoe Table II): W1 and W2 read, their gradients
//    read and written (6 M H); each GEMM reads or writes rows x (M + H);
//  recompute (the first GEMM): W1, the input and the middle.
inline double ffn_forward_bytes(std::int64_t rows, std::int64_t m, std::int64_t h, int elem) {
  if (rows <= 0) return 0;
  const double r = static_cast<double>(rows), M = static_cast<double>(m), H = static_cast<double>(h);
  return elem * (2 * M * H + 2 * r * (M + H));
}
inline double ffn_backward_bytes(std::int64_t rows, std::int64_t m, std::int64_t h, int elem) {
  if (rows <= 0) return 0;
  const double r = static_cast<double>(rows), M = static_cast<double>(m), H = static_cast<double>(h);
  return elem * (6 * M * H + 4 * r * (M + H));
}
inline double ffn_recompute_bytes(std::int64_t rows, std::int64_t m, std::int64_t h, int elem) {
  if (rows <= 0) return 0;
  const double r = static_cast<double>(rows), M = static_cast<double>(m), H = static_cast<double>(h);
  return elem * (M * H + r * (M + H));
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
