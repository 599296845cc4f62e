// Row-major GEMMs on column-major cuBLAS. The plan stores every buffer
// row-major; cuBLAS reads column-major. A row-major m x n matrix with leading
// dimension ld is, byte for byte, the column-major n x m matrix of its
// transpose, so C = op(A) op(B) becomes C^T = op(B)^T op(A)^T: swap the
// operands and m with n, keep the transposition flags and leading dimensions.
// Pure arithmetic, unit-tested against a naive column-major GEMM on the CPU.
#pragma once

#include <cstdint>

namespace moetrace::cuda {

// C (m x n) = alpha op(A) op(B) + beta C, everything row-major.
// op(A) is m x k: A is m x k (lda >= k), or k x m transposed (lda >= m).
struct RowMajorGemm {
  bool trans_a = false, trans_b = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t lda = 0, ldb = 0, ldc = 0;
};

// The cuBLAS call: gemm(op_first, op_second, m, n, k, first, ld_first,
// second, ld_second, C, ldc) with first = B and second = A of the row-major form.
struct ColumnMajorGemm {
  bool trans_first = false, trans_second = false;
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t ld_first = 0, ld_second = 0, ldc = 0;
};

constexpr ColumnMajorGemm to_column_major(const RowMajorGemm& g) {
  // C^T = op(B)^T op(A)^T: the operands swap, and so do m and n.
  return {.trans_first = g.trans_b, .trans_second = g.trans_a, .m = g.n, .n = g.m, .k = g.k,
          .ld_first = g.ldb, .ld_second = g.lda, .ldc = g.ldc};
}

// Plain row-major operands: A is m x k (or k x m), B is k x n (or n x k), C m x n.
constexpr RowMajorGemm row_major(bool trans_a, bool trans_b, std::int64_t m, std::int64_t n,
                                 std::int64_t k) {
  return {.trans_a = trans_a, .trans_b = trans_b, .m = m, .n = n, .k = k,
          .lda = trans_a ? m : k, .ldb = trans_b ? k : n, .ldc = n};
}

}  // namespace moetrace::cuda
