#include "moetrace/cupti/api_filter.h"

#include <cupti_driver_cbid.h>
#include <cupti_runtime_cbid.h>

#include <array>

namespace moetrace::cupti {

std::span<const CUpti_CallbackId> query_runtime_api() {
  static constexpr std::array<CUpti_CallbackId, 19> kIds{
      CUPTI_RUNTIME_TRACE_CBID_cudaGetDevice_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaGetDeviceCount_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaGetDeviceFlags_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaGetDeviceProperties_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaGetDeviceProperties_v12000,
      CUPTI_RUNTIME_TRACE_CBID_cudaDeviceGetAttribute_v5000,
      CUPTI_RUNTIME_TRACE_CBID_cudaGetLastError_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaPeekAtLastError_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaFuncGetAttributes_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaPointerGetAttributes_v4000,
      CUPTI_RUNTIME_TRACE_CBID_cudaDriverGetVersion_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaRuntimeGetVersion_v3020,
      CUPTI_RUNTIME_TRACE_CBID_cudaStreamGetPriority_v5050,
      CUPTI_RUNTIME_TRACE_CBID_cudaStreamGetPriority_ptsz_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaStreamGetFlags_v5050,
      CUPTI_RUNTIME_TRACE_CBID_cudaStreamGetFlags_ptsz_v7000,
      CUPTI_RUNTIME_TRACE_CBID_cudaStreamGetId_v12000,
      CUPTI_RUNTIME_TRACE_CBID_cudaStreamGetDevice_v12080,
      CUPTI_RUNTIME_TRACE_CBID_cudaStreamGetDevice_ptsz_v12080,
  };
  return kIds;
}

std::span<const CUpti_CallbackId> query_driver_api() {
  static constexpr std::array<CUpti_CallbackId, 22> kIds{
      CUPTI_DRIVER_TRACE_CBID_cuKernelGetAttribute,
      CUPTI_DRIVER_TRACE_CBID_cuKernelGetName,
      CUPTI_DRIVER_TRACE_CBID_cuKernelGetFunction,
      CUPTI_DRIVER_TRACE_CBID_cuKernelGetLibrary,
      CUPTI_DRIVER_TRACE_CBID_cuFuncGetAttribute,
      CUPTI_DRIVER_TRACE_CBID_cuFuncGetName,
      CUPTI_DRIVER_TRACE_CBID_cuCtxGetCurrent,
      CUPTI_DRIVER_TRACE_CBID_cuCtxGetDevice,
      CUPTI_DRIVER_TRACE_CBID_cuCtxGetDevice_v2,
      CUPTI_DRIVER_TRACE_CBID_cuCtxGetFlags,
      CUPTI_DRIVER_TRACE_CBID_cuCtxGetId,
      CUPTI_DRIVER_TRACE_CBID_cuCtxGetStreamPriorityRange,
      CUPTI_DRIVER_TRACE_CBID_cuDeviceGet,
      CUPTI_DRIVER_TRACE_CBID_cuDeviceGetAttribute,
      CUPTI_DRIVER_TRACE_CBID_cuDeviceGetCount,
      CUPTI_DRIVER_TRACE_CBID_cuDriverGetVersion,
      CUPTI_DRIVER_TRACE_CBID_cuDevicePrimaryCtxGetState,
      CUPTI_DRIVER_TRACE_CBID_cuPointerGetAttribute,
      CUPTI_DRIVER_TRACE_CBID_cuPointerGetAttributes,
      CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress,
      CUPTI_DRIVER_TRACE_CBID_cuGetProcAddress_v2,
      CUPTI_DRIVER_TRACE_CBID_cuGetErrorString,
  };
  return kIds;
}

}  // namespace moetrace::cupti
