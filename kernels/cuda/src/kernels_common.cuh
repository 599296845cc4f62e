// What the executor's kernel files share (kernels.cu, kernels_elementwise.cu,
// kernels_link.cu): element access in float, 16-byte vector access, the
// global timer, GeLU, and the host side's grids, type dispatch and launch
// check. Private to kernels/cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels.h"
#include "moetrace/cupti/check.h"

namespace moetrace::cuda::kernels {
namespace {

constexpr unsigned kFull = 0xffffffffu;
constexpr int kThreads = 256;

__device__ __forceinline__ float load(const float* p) { return *p; }
__device__ __forceinline__ float load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float v) { *p = __float2bfloat16_rn(v); }

// V consecutive elements as one access: V = 1 (any address), or 16 bytes
// (8 bf16, 4 float) from a 16-byte aligned address, so that the row-moving
// kernels below use 128-bit loads and stores (a warp moves 512 bytes per
// instruction, not 64) where the rows allow it (by_type_and_width).
template <class T>
constexpr int kPack = static_cast<int>(16 / sizeof(T));

template <int V, class T>
__device__ __forceinline__ void load_v(const T* p, float (&f)[V]) {
  if constexpr (V == 1) {
    f[0] = load(p);
  } else {
    static_assert(V == kPack<T>, "a vector is 16 bytes");
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const T* e = reinterpret_cast<const T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i) f[i] = load(e + i);
  }
}

template <int V, class T>
__device__ __forceinline__ void store_v(T* p, const float (&f)[V]) {
  if constexpr (V == 1) {
    store(p, f[0]);
  } else {
    static_assert(V == kPack<T>, "a vector is 16 bytes");
    uint4 raw;
    T* e = reinterpret_cast<T*>(&raw);
#pragma unroll
    for (int i = 0; i < V; ++i) store(e + i, f[i]);
    *reinterpret_cast<uint4*>(p) = raw;
  }
}

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Thread 0 waits until the global timer passes `deadline`; the block follows.
__device__ __forceinline__ void wait_until(unsigned long long deadline) {
  if (threadIdx.x == 0)
    while (globaltimer() < deadline) __nanosleep(256);
  __syncthreads();
}

// exact GeLU z Phi(z) and its derivative Phi(z) + z phi(z) (reference.h).
__device__ __forceinline__ float gelu(float z) { return 0.5f * z * (1.0f + erff(z * 0.70710678118654752f)); }
__device__ __forceinline__ float gelu_grad(float z) {
  return 0.5f * (1.0f + erff(z * 0.70710678118654752f)) + z * 0.39894228040143268f * expf(-0.5f * z * z);
}

inline unsigned grid_for(long long n, int threads = kThreads) {
  long long b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535LL * 16) b = 65535LL * 16;
  return static_cast<unsigned>(b);
}

inline dim3 row_grid(long long rows, long long cols) {
  long long x = (cols + kThreads - 1) / kThreads;
  if (x < 1) x = 1;
  long long y = rows < 1 ? 1 : (rows > 65535 ? 65535 : rows);
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

// Calls f(std::type_identity<T>) for the element type of `t`.
template <class F>
void by_type(DType t, F&& f) {
  if (t == DType::kBf16)
    f(std::type_identity<__nv_bfloat16>{});
  else
    f(std::type_identity<float>{});
}

// Calls f(std::type_identity<T>, std::integral_constant<int, V>) for the
// element type and the widest access every operand allows: 16 bytes where
// each row of each starts 16-byte aligned (cudaMallocAsync aligns to 256; a
// view's rows do when a row is a multiple of 16 bytes), else one element.
template <class F>
void by_type_and_width(DType t, long long cols, std::initializer_list<const void*> operands, F&& f) {
  by_type(t, [&](auto type) {
    using T = typename decltype(type)::type;
    bool packs = (cols * static_cast<long long>(sizeof(T))) % 16 == 0;
    for (const void* p : operands) packs = packs && reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
    if (packs)
      f(type, std::integral_constant<int, kPack<T>>{});
    else
      f(type, std::integral_constant<int, 1>{});
  });
}

inline void check_launch(const char* what) {
  ::moetrace::cupti::detail::check_cuda(cudaGetLastError(), what, __FILE__, __LINE__);
}

template <class T>
T* as(void* p) {
  return static_cast<T*>(p);
}
template <class T>
const T* as(const void* p) {
  return static_cast<const T*>(p);
}

}  // namespace
}  // namespace moetrace::cuda::kernels
