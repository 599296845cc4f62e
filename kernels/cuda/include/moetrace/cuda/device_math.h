// The few formulas the host plans with and the device kernels execute, in
// one dependency-free header so nvcc compiles exactly what the CPU unit tests
// check: routed-layout rows (op_layout.h) and link pacing (link_model.h).
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define MOETRACE_HD __host__ __device__
#else
#define MOETRACE_HD
#endif

namespace moetrace::cuda {

enum class DType : std::uint8_t { kBf16 = 0, kFp32 = 1 };
MOETRACE_HD inline int dtype_bytes(DType t) { return t == DType::kBf16 ? 2 : 4; }

inline constexpr int kMaxGemmGroups = 64;  // spans per grouped GEMM call

// A RoutedLayout as the permute kernels read it: per listed expert i, a row
// of layout_stride(num_chunks) int64 values
//   [expert, n, offset(0, i), chunk_begin(n, 0), ..., offset(C-1, i), chunk_begin(n, C-1)]
// (pipemoe Eq. 5 chunking: chunk c of expert i holds its rows q with
// chunk_begin(n, c) <= q < chunk_begin(n, c + 1)).
MOETRACE_HD inline int layout_stride(int num_chunks) { return 2 + 2 * num_chunks; }

// Row of the permuted buffer that holds the q-th token (in token order)
// routed to the expert of `entry`; -1 where the plan reserved fewer rows
// (the gate routed more tokens there than the plan was built for).
MOETRACE_HD inline std::int64_t layout_row(const std::int64_t* entry, int num_chunks,
                                           std::int64_t q) {
  const std::int64_t n = entry[1];
  if (q < 0 || q >= n) return -1;
  int c = num_chunks - 1;
  while (c > 0 && entry[2 + 2 * c + 1] > q) --c;
  return entry[2 + 2 * c] + (q - entry[2 + 2 * c + 1]);
}

// plan's SplitMix64 (kernels/plan/src/random.h) as a counter: its state
// after k draws is seed + k * gamma, so the k-th draw (k >= 1) and the n-th
// normal() (0-based; two draws each, Box-Muller) come without the draws
// before them. The device fills an input of iteration 9 with exactly the
// values random_training_data gives it, without the host making them.
MOETRACE_HD inline std::uint64_t splitmix64_draw(std::uint64_t seed, std::uint64_t k) {
  std::uint64_t z = seed + k * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
MOETRACE_HD inline double splitmix64_normal(std::uint64_t seed, std::uint64_t n) {
  const double u1 = 1.0 - static_cast<double>(splitmix64_draw(seed, 2 * n + 1) >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>(splitmix64_draw(seed, 2 * n + 2) >> 11) * 0x1.0p-53;
  return ::sqrt(-2.0 * ::log(u1)) * ::cos(6.283185307179586 * u2);
}

// The gate's top-k order (gate_softmax_topk_kernel): a higher probability
// first, ties to the lower expert; a NaN probability (from NaN or infinite
// logits) ranks below every number, so every slot names an expert in
// [0, E) whatever the logits hold. `e` or `best` < 0: no candidate.
MOETRACE_HD inline bool gate_prefers(float v, int e, float best_v, int best) {
  if (e < 0) return false;
  if (best < 0) return true;
  const bool v_nan = v != v, best_nan = best_v != best_v;
  if (v_nan != best_nan) return best_nan;
  if (!v_nan && v != best_v) return v > best_v;
  return e < best;
}

// Pacing of the emulated link (link_model.h): the pieces of a rank's paced
// bytes are dealt round-robin to `blocks` blocks; each block, having copied
// `done` bytes, waits until latency_ns + done * ns_per_byte_per_block after
// its own start. Together the blocks move the bytes at the modelled
// bandwidth; a block that starts late (its SM busy with an expert GEMM)
// finishes late, which is the contention we want to see.
struct PaceParams {
  std::int64_t latency_ns = 0;
  double ns_per_byte_per_block = 0;  // blocks / bandwidth
  std::int64_t piece_bytes = 65536;
  int blocks = 1;
};

MOETRACE_HD inline std::int64_t pace_deadline_ns(const PaceParams& p, std::int64_t block_done) {
  return p.latency_ns + static_cast<std::int64_t>(static_cast<double>(block_done) *
                                                  p.ns_per_byte_per_block);
}

// Bytes block b copies out of `total` when pieces are dealt round-robin.
MOETRACE_HD inline std::int64_t block_share(std::int64_t total, std::int64_t piece, int blocks,
                                            int b) {
  const std::int64_t pieces = (total + piece - 1) / piece;
  std::int64_t share = 0;
  for (std::int64_t i = b; i < pieces; i += blocks) {
    const std::int64_t begin = i * piece;
    const std::int64_t end = begin + piece < total ? begin + piece : total;
    share += end - begin;
  }
  return share;
}

}  // namespace moetrace::cuda
