#include "gemm.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <climits>

#include "check.h"
#include "kernels.h"
#include "moetrace/schema/error.h"

namespace moetrace::cuda {
namespace {

cudaDataType_t cuda_type(DType t) { return t == DType::kBf16 ? CUDA_R_16BF : CUDA_R_32F; }
cublasOperation_t op(bool trans) { return trans ? CUBLAS_OP_T : CUBLAS_OP_N; }

int narrow(std::int64_t v, const char* what) {
  if (v < 0 || v > INT32_MAX) throw Error(fmt::format("GEMM {} ({}) does not fit cuBLAS's int", what, v));
  return static_cast<int>(v);
}

std::atomic<bool> g_grouped_supported{true};
std::atomic<std::int64_t> g_fallbacks{0};

}  // namespace

void gemm(cublasHandle_t h, const RowMajorGemm& g, const void* A, const void* B, void* C, DType ab,
          DType c, float alpha, float beta) {
  if (g.m == 0 || g.n == 0) return;
  const ColumnMajorGemm cm = to_column_major(g);
  MOETRACE_CUBLAS_CHECK(cublasGemmEx(h, op(cm.trans_first), op(cm.trans_second), narrow(cm.m, "m"),
                                     narrow(cm.n, "n"), narrow(cm.k, "k"), &alpha, B, cuda_type(ab),
                                     narrow(cm.ld_first, "ldb"), A, cuda_type(ab),
                                     narrow(cm.ld_second, "lda"), &beta, C, cuda_type(c),
                                     narrow(cm.ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void gemm_strided_batched(cublasHandle_t h, const RowMajorGemm& g, const void* A, std::int64_t stride_a,
                          const void* B, std::int64_t stride_b, void* C, std::int64_t stride_c, std::int64_t batch,
                          DType ab, DType c, float alpha, float beta) {
  if (g.m == 0 || g.n == 0 || batch <= 0) return;
  const ColumnMajorGemm cm = to_column_major(g);
  MOETRACE_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      h, op(cm.trans_first), op(cm.trans_second), narrow(cm.m, "m"), narrow(cm.n, "n"), narrow(cm.k, "k"), &alpha, B,
      cuda_type(ab), narrow(cm.ld_first, "ldb"), stride_b, A, cuda_type(ab), narrow(cm.ld_second, "lda"), stride_a,
      &beta, C, cuda_type(c), narrow(cm.ldc, "ldc"), stride_c, narrow(batch, "batch"), CUBLAS_COMPUTE_32F,
      CUBLAS_GEMM_DEFAULT));
}

void grouped_gemm(cublasHandle_t h, cudaStream_t s, RowMajorGemm shape,
                  const std::vector<GroupedProblem>& problems, DType t, float alpha, float beta,
                  void** device_ptrs, bool grouped) {
  std::vector<GroupedProblem> live;
  for (const auto& p : problems)
    if (p.m > 0) live.push_back(p);
  if (live.empty() || shape.n == 0) return;
  auto one_by_one = [&](const std::vector<GroupedProblem>& ps) {
    for (const auto& p : ps) {
      RowMajorGemm g = shape;
      g.m = p.m;
      gemm(h, g, p.A, p.B, p.C, t, t, alpha, beta);
    }
  };
  if (live.size() == 1 || !grouped || !g_grouped_supported.load()) {
    if (live.size() > 1 && grouped) g_fallbacks += 1;
    one_by_one(live);
    return;
  }
  for (std::size_t first = 0; first < live.size(); first += kMaxGemmGroups) {
    const std::size_t n = std::min<std::size_t>(kMaxGemmGroups, live.size() - first);
    const std::vector<GroupedProblem> part(live.begin() + static_cast<std::ptrdiff_t>(first),
                                           live.begin() + static_cast<std::ptrdiff_t>(first + n));
    // Column-major: the first operand is the row-major B, the second the row-major A.
    kernels::PointerBatch batch;
    batch.n = static_cast<int>(3 * n);
    for (std::size_t i = 0; i < n; ++i) {
      batch.p[i] = part[i].B;
      batch.p[n + i] = part[i].A;
      batch.p[2 * n + i] = part[i].C;
    }
    kernels::fill_pointers(s, batch, const_cast<const void**>(device_ptrs));
    std::vector<cublasOperation_t> ta(n), tb(n);
    std::vector<int> m(n), nn(n), k(n), lda(n), ldb(n), ldc(n), size(n, 1);
    std::vector<float> al(n, alpha), be(n, beta);
    for (std::size_t i = 0; i < n; ++i) {
      RowMajorGemm g = shape;
      g.m = part[i].m;
      const ColumnMajorGemm cm = to_column_major(g);
      ta[i] = op(cm.trans_first);
      tb[i] = op(cm.trans_second);
      m[i] = narrow(cm.m, "m");
      nn[i] = narrow(cm.n, "n");
      k[i] = narrow(cm.k, "k");
      lda[i] = narrow(cm.ld_first, "ldb");
      ldb[i] = narrow(cm.ld_second, "lda");
      ldc[i] = narrow(cm.ldc, "ldc");
    }
    const cublasStatus_t st = cublasGemmGroupedBatchedEx(
        h, ta.data(), tb.data(), m.data(), nn.data(), k.data(), al.data(), const_cast<const void* const*>(device_ptrs), cuda_type(t),
        lda.data(), const_cast<const void* const*>(device_ptrs + n), cuda_type(t), ldb.data(), be.data(),
        device_ptrs + 2 * n, cuda_type(t),
        ldc.data(), static_cast<int>(n), size.data(), CUBLAS_COMPUTE_32F);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_ARCH_MISMATCH) {
      // This cuBLAS / architecture / type combination has no grouped GEMM:
      // remember it, and run these problems one by one.
      g_grouped_supported = false;
      g_fallbacks += 1;
      one_by_one(part);
      continue;
    }
    MOETRACE_CUBLAS_CHECK(st);
  }
}

std::int64_t grouped_gemm_fallbacks() { return g_fallbacks.load(); }

}  // namespace moetrace::cuda
