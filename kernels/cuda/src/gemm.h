// Row-major GEMMs on cuBLAS (row_major_gemm.h maps them to column-major):
// bf16 or fp32 operands, fp32 accumulation (CUBLAS_COMPUTE_32F: no TF32),
// C in the operands' type or fp32 (gradients of parameters).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <vector>

#include "moetrace/cuda/device_math.h"
#include "moetrace/cuda/row_major_gemm.h"

namespace moetrace::cuda {

// C = alpha op(A) op(B) + beta C.
void gemm(cublasHandle_t h, const RowMajorGemm& g, const void* A, const void* B, void* C, DType ab,
          DType c, float alpha, float beta);

// `batch` GEMMs of one shape, operand i at A + i strideA etc. (strides in
// elements): one cublasGemmStridedBatchedEx call.
void gemm_strided_batched(cublasHandle_t h, const RowMajorGemm& g, const void* A, std::int64_t stride_a,
                          const void* B, std::int64_t stride_b, void* C, std::int64_t stride_c, std::int64_t batch,
                          DType ab, DType c, float alpha, float beta);

// Problems with the same n, k, transposition and leading dimensions and
// their own m (an expert's row spans): one cublasGemmGroupedBatchedEx call
// with a group per problem (the pointer arrays are written to `device_ptrs`,
// 3 x kMaxGemmGroups entries, on the handle's stream first), or with
// `grouped` false one cublasGemmEx per problem. Falls back to one per problem
// where cuBLAS does not support the grouped call.
struct GroupedProblem {
  std::int64_t m = 0;
  const void* A = nullptr;
  const void* B = nullptr;
  void* C = nullptr;
};
void grouped_gemm(cublasHandle_t h, cudaStream_t s, RowMajorGemm shape,
                  const std::vector<GroupedProblem>& problems, DType t, float alpha, float beta,
                  void** device_ptrs, bool grouped = true);

// How many grouped calls fell back to per-problem GEMMs (for the run summary).
std::int64_t grouped_gemm_fallbacks();

}  // namespace moetrace::cuda
