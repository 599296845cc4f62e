// Status checks for CUDA runtime and CUPTI calls: a failed call throws
// moetrace::Error "file.cc:123: cudaMallocAsync(&p, n, s) failed:
// cudaErrorMemoryAllocation (out of memory)". Every call is checked; the
// macros keep the call sites one line long. (CUDA headers: only the CUDA
// executor and the collector include this.)
#pragma once

#include <cuda_runtime_api.h>
#include <cupti_result.h>

#include <string>

namespace moetrace::cupti::detail {

[[noreturn]] void throw_status(const char* expr, const char* file, int line, const char* name,
                               const char* text);
std::string cuda_error_text(cudaError_t e);  // "cudaErrorNoDevice (no CUDA-capable device is detected)"

inline void check_cuda(cudaError_t e, const char* expr, const char* file, int line) {
  if (e != cudaSuccess) throw_status(expr, file, line, cudaGetErrorName(e), cudaGetErrorString(e));
}
void check_cupti(CUptiResult r, const char* expr, const char* file, int line);

}  // namespace moetrace::cupti::detail

#define MOETRACE_CUDA_CHECK(expr) ::moetrace::cupti::detail::check_cuda((expr), #expr, __FILE__, __LINE__)
#define MOETRACE_CUPTI_CHECK(expr) ::moetrace::cupti::detail::check_cupti((expr), #expr, __FILE__, __LINE__)
