// The API calls the collector leaves out by default (cupti/api_filter.h):
// the queries cuBLAS makes on every GEMM are among them, and no call that
// launches, waits, copies, allocates or records an event is.
#include <gtest/gtest.h>

#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>

#include <algorithm>
#include <set>

#include "moetrace/cupti/api_filter.h"

namespace moetrace::cupti {
namespace {

bool has(std::span<const CUpti_CallbackId> ids, CUpti_CallbackId id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

TEST(ApiFilter, TheQueriesOfEveryGemmAreLeftOut) {
  // On an H200, PipeMoE at r = 8: 792 of each an iteration.
  EXPECT_TRUE(has(query_runtime_api(), CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020));
  EXPECT_TRUE(has(query_driver_api(), CUPTI_DRIVER_TRACE_CBID_cuKernelGetAttribute));
  EXPECT_TRUE(has(query_runtime_api(), CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020));
  EXPECT_TRUE(has(query_driver_api(), CUPTI_DRIVER_TRACE_CBID_cuKernelGetName));
  for (auto ids : {query_runtime_api(), query_driver_api()})
    EXPECT_EQ(std::set<CUpti_CallbackId>(ids.begin(), ids.end()).size(), ids.size()) << "a call listed twice";
}

TEST(ApiFilter, NothingAnAnalysisReadsIsLeftOut) {
  for (CUpti_CallbackId id : {
           CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
           CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
           CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
           CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
           CUPTI_RUNTIME_TRACE_CBID_cudaStreamWaitEvent_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaEventRecord_v3020,
           CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
           CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMalloc_v3020,
           CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020, CUPTI_RUNTIME_TRACE_CBID_cudaMallocAsync_v11020,
           CUPTI_RUNTIME_TRACE_CBID_cudaFreeAsync_v11020, CUPTI_RUNTIME_TRACE_CBID_cudaHostAlloc_v3020})
    EXPECT_FALSE(has(query_runtime_api(), id)) << "runtime cbid " << id;
  for (CUpti_CallbackId id : {
           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
           CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
           CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,
           CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize, CUPTI_DRIVER_TRACE_CBID_cuEventRecord,
           CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent, CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync,
           CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2, CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2,
           CUPTI_DRIVER_TRACE_CBID_cuMemAllocAsync, CUPTI_DRIVER_TRACE_CBID_cuMemFreeAsync})
    EXPECT_FALSE(has(query_driver_api(), id)) << "driver cbid " << id;
}

}  // namespace
}  // namespace moetrace::cupti
