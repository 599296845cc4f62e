// The CUDA API calls whose activity records the collector leaves out unless
// asked for (CollectorOptions::query_api): calls that only read state (the
// current device, a kernel's attribute or name, the last error, a pointer's
// attributes), launch nothing and never wait. cuBLAS makes several of them
// on every GEMM: on an H200 running PipeMoE at r = 8 a traced iteration held
// 792 cudaGetDevice and 792 cuKernelGetAttribute records beside 684 kernel
// launches (BENCHMARKS.md, "The GPU path"), and each record costs the
// issuing thread time where the host bounds the iteration. No analysis reads
// them: launches, synchronisations, copies and allocations stay recorded.
// CUPTI headers only (no libcupti), so the lists are unit-tested anywhere.
#pragma once

#include <cupti_callbacks.h>

#include <span>

namespace moetrace::cupti {

std::span<const CUpti_CallbackId> query_runtime_api();  // CUPTI_RUNTIME_TRACE_CBID_*
std::span<const CUpti_CallbackId> query_driver_api();   // CUPTI_DRIVER_TRACE_CBID_*

}  // namespace moetrace::cupti
