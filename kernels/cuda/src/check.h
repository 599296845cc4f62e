// Status checks of every CUDA, cuBLAS and NCCL call in the executor: a failed
// call throws moetrace::Error "executor.cc:123: cublasGemmEx(...) failed:
// CUBLAS_STATUS_NOT_SUPPORTED (...)".
#pragma once

#include <cublas_v2.h>
#include <nccl.h>

#include "moetrace/cupti/check.h"

namespace moetrace::cuda::detail {

inline void check_cublas(cublasStatus_t s, const char* expr, const char* file, int line) {
  if (s != CUBLAS_STATUS_SUCCESS)
    ::moetrace::cupti::detail::throw_status(expr, file, line, cublasGetStatusName(s), cublasGetStatusString(s));
}

inline void check_nccl(ncclResult_t r, const char* expr, const char* file, int line) {
  if (r != ncclSuccess && r != ncclInProgress)
    ::moetrace::cupti::detail::throw_status(expr, file, line, "ncclError", ncclGetErrorString(r));
}

}  // namespace moetrace::cuda::detail

#define MOETRACE_CUBLAS_CHECK(expr) ::moetrace::cuda::detail::check_cublas((expr), #expr, __FILE__, __LINE__)
#define MOETRACE_NCCL_CHECK(expr) ::moetrace::cuda::detail::check_nccl((expr), #expr, __FILE__, __LINE__)
