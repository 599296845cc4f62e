// The executor's own kernels: gating softmax/top-k and its backward, the
// routing index maps, permute/unpermute and their backward, GeLU over row
// spans, SGD, and the emulated link's paced copy/reduce. GEMMs are cuBLAS
// (gemm.cc). Row-wise kernels put rows on grid.y (strided past 65535) and
// columns on grid.x, so a row's index data is read once per block.
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

unsigned grid_for(long long n, int threads = kThreads) {
  long long b = (n + threads - 1) / threads;
  if (b < 1) b = 1;
  if (b > 65535LL * 16) b = 65535LL * 16;
  return static_cast<unsigned>(b);
}

dim3 row_grid(long long rows, long long cols) {
  long long x = (cols + kThreads - 1) / kThreads;
  if (x < 1) x = 1;
  long long y = rows < 1 ? 1 : (rows > 65535 ? 65535 : rows);
  return dim3(static_cast<unsigned>(x), static_cast<unsigned>(y));
}

// Calls f(std::type_identity<T>, std::integral_constant<int, V>) for the
// element type and the widest access every operand allows: 16 bytes where
// each row of each starts 16-byte aligned (cudaMallocAsync aligns to 256; a
// view's rows do when a row is a multiple of 16 bytes), else one element.
template <class F>
void by_type_and_width(DType t, long long cols, std::initializer_list<const void*> operands, F&& f) {
  auto go = [&](auto type) {
    using T = typename decltype(type)::type;
    bool packs = (cols * static_cast<long long>(sizeof(T))) % 16 == 0;
    for (const void* p : operands) packs = packs && reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
    if (packs)
      f(type, std::integral_constant<int, kPack<T>>{});
    else
      f(type, std::integral_constant<int, 1>{});
  };
  if (t == DType::kBf16)
    go(std::type_identity<__nv_bfloat16>{});
  else
    go(std::type_identity<float>{});
}

void check_launch(const char* what) {
  ::moetrace::cupti::detail::check_cuda(cudaGetLastError(), what, __FILE__, __LINE__);
}

// ---------------------------------------------------------------------------
// Gate

__global__ void gate_softmax_topk_kernel(const float* __restrict__ logits, long long tokens, int E,
                                         int k, float* __restrict__ probs,
                                         float* __restrict__ routing,
                                         const int* __restrict__ planned,
                                         unsigned long long* __restrict__ counts) {
  const int lane = threadIdx.x & 31;
  // A warp per token, grid-stride: the grid is capped (grid_for), the tokens
  // are not. The loop bound is the same for the whole warp.
  const long long warps = static_cast<long long>(gridDim.x) * (blockDim.x / 32);
  for (long long token = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32; token < tokens;
       token += warps) {
    const float* l = logits + token * E;
    float mx = -INFINITY;
    for (int e = lane; e < E; e += 32) mx = fmaxf(mx, l[e]);
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
    float sum = 0.0f;
    for (int e = lane; e < E; e += 32) sum += expf(l[e] - mx);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
    const float inv = 1.0f / sum;
    float* p = probs + token * E;
    for (int e = lane; e < E; e += 32) p[e] = expf(l[e] - mx) * inv;
    int chosen[kMaxTopK];
    for (int slot = 0; slot < k; ++slot) {
      int id = 0;
      if (planned != nullptr) {
        id = planned[token * k + slot];
      } else {
        float bv = 0.0f;
        int bi = -1;  // no candidate yet
        for (int e = lane; e < E; e += 32) {
          bool taken = false;
          for (int j = 0; j < slot; ++j) taken = taken || chosen[j] == e;
          if (taken) continue;
          const float v = expf(l[e] - mx) * inv;
          if (gate_prefers(v, e, bv, bi)) {
            bv = v;
            bi = e;
          }
        }
        for (int o = 16; o > 0; o >>= 1) {
          const float ov = __shfl_xor_sync(kFull, bv, o);
          const int oi = __shfl_xor_sync(kFull, bi, o);
          if (gate_prefers(ov, oi, bv, bi)) {
            bv = ov;
            bi = oi;
          }
        }
        // k <= E (checked on the host), so some expert was free: bi is in [0, E).
        id = bi;
      }
      chosen[slot] = id;
      if (lane == 0) {
        float* r = routing + token * 2 * k;
        r[slot] = static_cast<float>(id);
        r[k + slot] = expf(l[id] - mx) * inv;
        if (counts != nullptr) atomicAdd(counts + id, 1ULL);
      }
    }
  }
}

template <class T>
__global__ void gate_backward_kernel(const float* __restrict__ probs, const float* __restrict__ routing,
                                     const float* __restrict__ d_weights, long long tokens, int E,
                                     int k, T* __restrict__ d_logits) {
  const int lane = threadIdx.x & 31;
  const long long warps = static_cast<long long>(gridDim.x) * (blockDim.x / 32);
  for (long long token = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32; token < tokens;
       token += warps) {
    const float* p = probs + token * E;
    const float* r = routing + token * 2 * k;
    const float* dw = d_weights + token * k;
    float dot = 0.0f;
    for (int s = 0; s < k; ++s) dot += p[__float2int_rn(r[s])] * dw[s];
    for (int e = lane; e < E; e += 32) {
      float dp = 0.0f;
      for (int s = 0; s < k; ++s)
        if (__float2int_rn(r[s]) == e) dp = dw[s];
      store(d_logits + token * E + e, p[e] * (dp - dot));
    }
  }
}

// ---------------------------------------------------------------------------
// Routing maps: one block per listed expert scans the tokens in order; the
// q-th token routed to the expert goes to layout_row(entry, q).

__global__ void __launch_bounds__(1024) routing_maps_kernel(const float* __restrict__ routing, long long tokens, int k,
                                    const long long* __restrict__ table, int chunks,
                                    int* __restrict__ positions, int* __restrict__ inverse,
                                    unsigned long long* __restrict__ mismatches) {
  __shared__ int warp_offset[32];
  __shared__ int tile_total;
  const long long* entry = table + static_cast<long long>(blockIdx.x) * layout_stride(chunks);
  const int expert = static_cast<int>(entry[0]);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  long long base = 0;
  for (long long t0 = 0; t0 < tokens; t0 += blockDim.x) {
    const long long t = t0 + threadIdx.x;
    int slot = -1;
    if (t < tokens)
      for (int s = 0; s < k; ++s)
        if (__float2int_rn(routing[t * 2 * k + s]) == expert) slot = s;
    const unsigned ballot = __ballot_sync(kFull, slot >= 0);
    const int within = __popc(ballot & ((1u << lane) - 1u));
    if (lane == 0) warp_offset[warp] = __popc(ballot);
    __syncthreads();
    if (threadIdx.x == 0) {
      int acc = 0;
      for (int w = 0; w < warps; ++w) {
        const int v = warp_offset[w];
        warp_offset[w] = acc;
        acc += v;
      }
      tile_total = acc;
    }
    __syncthreads();
    if (slot >= 0) {
      const long long q = base + warp_offset[warp] + within;
      const long long row = layout_row(reinterpret_cast<const std::int64_t*>(entry), chunks, q);
      if (row >= 0) {
        positions[t * k + slot] = static_cast<int>(row);
        inverse[row] = static_cast<int>(t * k + slot);
      }
    }
    base += tile_total;
    __syncthreads();
  }
  if (threadIdx.x == 0 && mismatches != nullptr && base != entry[1]) atomicAdd(mismatches, 1ULL);
}

// ---------------------------------------------------------------------------
// Permute family

// The row-moving kernels: thread c of a row handles elements [c V, c V + V)
// of it (cols is a multiple of V).
template <class T, int V>
__global__ void permute_rows_kernel(const T* __restrict__ x, long long cols, int k,
                                    const int* __restrict__ inverse, long long rows, T* __restrict__ out) {
  const long long c = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) * V;
  if (c >= cols) return;
  for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
    const int src = inverse[r];
    float v[V] = {};
    if (src >= 0) load_v<V>(x + static_cast<long long>(src / k) * cols + c, v);
    store_v<V>(out + r * cols + c, v);
  }
}

template <class T, int V>
__global__ void permute_backward_kernel(const T* __restrict__ d_permuted, long long cols,
                                        const int* __restrict__ positions, long long tokens, int k,
                                        T* __restrict__ dx) {
  const long long c = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) * V;
  if (c >= cols) return;
  for (long long t = blockIdx.y; t < tokens; t += gridDim.y) {
    float acc[V];
    load_v<V>(dx + t * cols + c, acc);
    for (int s = 0; s < k; ++s) {
      const int pos = positions[t * k + s];
      if (pos < 0) continue;
      float v[V];
      load_v<V>(d_permuted + static_cast<long long>(pos) * cols + c, v);
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] += v[i];
    }
    store_v<V>(dx + t * cols + c, acc);
  }
}

template <class T, int V>
__global__ void unpermute_kernel(const T* __restrict__ combined, const float* __restrict__ routing,
                                 const int* __restrict__ positions, long long tokens, int k,
                                 long long cols, T* __restrict__ y) {
  const long long c = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) * V;
  if (c >= cols) return;
  for (long long t = blockIdx.y; t < tokens; t += gridDim.y) {
    float acc[V] = {};
    for (int s = 0; s < k; ++s) {
      const int pos = positions[t * k + s];
      if (pos < 0) continue;
      const float w = routing[t * 2 * k + k + s];
      float v[V];
      load_v<V>(combined + static_cast<long long>(pos) * cols + c, v);
#pragma unroll
      for (int i = 0; i < V; ++i) acc[i] += w * v[i];
    }
    store_v<V>(y + t * cols + c, acc);
  }
}

template <class T, int V>
__global__ void unpermute_backward_rows_kernel(const T* __restrict__ dy, const float* __restrict__ routing,
                                               const int* __restrict__ inverse, int k, long long rows,
                                               long long cols, T* __restrict__ d_combined) {
  const long long c = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) * V;
  if (c >= cols) return;
  for (long long r = blockIdx.y; r < rows; r += gridDim.y) {
    const int src = inverse[r];
    float v[V] = {};
    if (src >= 0) {
      const long long t = src / k;
      const float w = routing[t * 2 * k + k + src % k];
      load_v<V>(dy + t * cols + c, v);
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] *= w;
    }
    store_v<V>(d_combined + r * cols + c, v);
  }
}

// One block per (token, slot): <dy[t], combined[row]>, V elements an access.
template <class T, int V>
__global__ void unpermute_backward_weights_kernel(const T* __restrict__ dy, const T* __restrict__ combined,
                                                  const int* __restrict__ positions, long long pairs,
                                                  int k, long long cols, float* __restrict__ d_weights) {
  __shared__ float partial[32];
  for (long long i = blockIdx.x; i < pairs; i += gridDim.x) {
    const int pos = positions[i];
    const long long t = i / k;
    float acc = 0.0f;
    if (pos >= 0)
      for (long long c = threadIdx.x * V; c < cols; c += blockDim.x * V) {
        float u[V], v[V];
        load_v<V>(dy + t * cols + c, u);
        load_v<V>(combined + static_cast<long long>(pos) * cols + c, v);
#pragma unroll
        for (int j = 0; j < V; ++j) acc += u[j] * v[j];
      }
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(kFull, acc, o);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      float sum = 0.0f;
      for (int w = 0; w < static_cast<int>(blockDim.x >> 5); ++w) sum += partial[w];
      d_weights[i] = sum;
    }
    __syncthreads();
  }
}

// ---------------------------------------------------------------------------
// GeLU over row spans, SGD, pointer arrays

// Thread i handles elements [i V, i V + V) of a span (hidden is a multiple of V).
template <class T, int V>
__global__ void gelu_forward_kernel(const T* __restrict__ middle, long long hidden, SpanBatch spans,
                                    T* __restrict__ a) {
  const int s = blockIdx.y;
  const long long n = spans.count[s] * hidden;
  const T* m = middle + spans.begin[s] * hidden;
  T* out = a + spans.prefix[s] * hidden;
  for (long long i = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) * V; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x * V) {
    float z[V];
    load_v<V>(m + i, z);
#pragma unroll
    for (int j = 0; j < V; ++j) z[j] = gelu(z[j]);
    store_v<V>(out + i, z);
  }
}

template <class T, int V>
__global__ void gelu_backward_kernel(const T* __restrict__ middle, long long hidden, SpanBatch spans,
                                     T* __restrict__ a, T* __restrict__ g) {
  const int s = blockIdx.y;
  const long long n = spans.count[s] * hidden;
  const T* m = middle + spans.begin[s] * hidden;
  T* ao = a + spans.prefix[s] * hidden;
  T* go = g + spans.prefix[s] * hidden;
  for (long long i = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) * V; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x * V) {
    float z[V], d[V], act[V];
    load_v<V>(m + i, z);
    load_v<V>(go + i, d);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      act[j] = gelu(z[j]);
      d[j] *= gelu_grad(z[j]);
    }
    store_v<V>(ao + i, act);
    store_v<V>(go + i, d);
  }
}

template <class T>
__global__ void sgd_kernel(T* __restrict__ params, float* __restrict__ grads, long long n, float lr) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x) {
    store(params + i, load(params + i) - lr * grads[i]);
    grads[i] = 0.0f;
  }
}

// A warp per row, grid-stride over rows.
template <class T>
__global__ void softmax_rows_kernel(T* __restrict__ data, long long rows, long long cols) {
  const int lane = threadIdx.x & 31;
  const long long warps = static_cast<long long>(gridDim.x) * (blockDim.x / 32);
  for (long long r = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32; r < rows; r += warps) {
    T* row = data + r * cols;
    float mx = -INFINITY;
    for (long long c = lane; c < cols; c += 32) mx = fmaxf(mx, load(row + c));
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(kFull, mx, o));
    float sum = 0.0f;
    for (long long c = lane; c < cols; c += 32) sum += expf(load(row + c) - mx);
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(kFull, sum, o);
    const float inv = 1.0f / sum;
    for (long long c = lane; c < cols; c += 32) store(row + c, expf(load(row + c) - mx) * inv);
  }
}

template <class T>
__global__ void softmax_rows_backward_kernel(const T* __restrict__ probs, T* __restrict__ grad, long long rows,
                                             long long cols) {
  const int lane = threadIdx.x & 31;
  const long long warps = static_cast<long long>(gridDim.x) * (blockDim.x / 32);
  for (long long r = (blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x) / 32; r < rows; r += warps) {
    const T* p = probs + r * cols;
    T* g = grad + r * cols;
    float dot = 0.0f;
    for (long long c = lane; c < cols; c += 32) dot += load(g + c) * load(p + c);
    for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(kFull, dot, o);
    for (long long c = lane; c < cols; c += 32) store(g + c, load(p + c) * (load(g + c) - dot));
  }
}

// One block: the load histogram in global scratch, then thread 0's greedy
// loop over shared copies of the loads (Algorithm 1 walks experts one by one).
__global__ void plan_search_kernel(const float* __restrict__ routing, long long tokens, int k, int E, int D,
                                   int* __restrict__ counts) {
  extern __shared__ long long slots[];  // E expert loads, then D device loads
  for (int e = threadIdx.x; e < E; e += blockDim.x) counts[e] = 0;
  __syncthreads();
  for (long long i = threadIdx.x; i < tokens * k; i += blockDim.x) {
    const long long t = i / k, slot = i % k;
    const int id = __float2int_rn(routing[t * 2 * k + slot]);
    if (id >= 0 && id < E) atomicAdd(counts + id, 1);
  }
  __syncthreads();
  long long* expert = slots;
  long long* device = slots + E;
  const int local = E / D > 0 ? E / D : 1;
  for (int d = threadIdx.x; d < D; d += blockDim.x) device[d] = 0;
  __syncthreads();
  for (int e = threadIdx.x; e < E; e += blockDim.x) {
    expert[e] = counts[e];
    atomicAdd(reinterpret_cast<unsigned long long*>(device + min(e / local, D - 1)),
              static_cast<unsigned long long>(counts[e]));
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  for (int step = 0; step < E; ++step) {
    int heavy = 0, light = 0;
    for (int d = 1; d < D; ++d) {
      if (device[d] > device[heavy]) heavy = d;
      if (device[d] < device[light]) light = d;
    }
    int pick = -1;
    for (int e = heavy * local; e < (heavy + 1) * local && e < E; ++e)
      if (expert[e] >= 0 && (pick < 0 || expert[e] > expert[pick])) pick = e;
    if (pick < 0) break;  // the heaviest device has no expert left to choose
    const long long moved = expert[pick] / 2;
    device[heavy] -= moved;
    device[light] += moved;
    expert[pick] = -1;  // chosen
  }
  counts[0] = static_cast<int>(device[0]);  // keep the loop's result observable
}

template <class T>
__global__ void fill_normal_kernel(T* __restrict__ dst, long long n, unsigned long long seed,
                                   unsigned long long first) {
  for (long long i = blockIdx.x * static_cast<long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<long long>(gridDim.x) * blockDim.x)
    store(dst + i, static_cast<float>(splitmix64_normal(seed, first + static_cast<unsigned long long>(i))));
}

__global__ void fill_pointers_kernel(PointerBatch batch, const void** out) {
  const int i = threadIdx.x;
  if (i < batch.n) out[i] = batch.p[i];
}

// ---------------------------------------------------------------------------
// Emulated link

// src == nullptr: the bytes leave this rank (the sender's side of a
// transfer the receiver copies): paced, not copied.
__device__ void copy_bytes(const char* __restrict__ src, char* __restrict__ dst, long long bytes) {
  if (src == nullptr) return;
  const auto a = reinterpret_cast<unsigned long long>(src) | reinterpret_cast<unsigned long long>(dst) |
                 static_cast<unsigned long long>(bytes);
  if ((a & 15) == 0) {
    const auto* s = reinterpret_cast<const uint4*>(src);
    auto* d = reinterpret_cast<uint4*>(dst);
    for (long long i = threadIdx.x; i < bytes / 16; i += blockDim.x) d[i] = s[i];
  } else if ((a & 3) == 0) {
    const auto* s = reinterpret_cast<const unsigned*>(src);
    auto* d = reinterpret_cast<unsigned*>(dst);
    for (long long i = threadIdx.x; i < bytes / 4; i += blockDim.x) d[i] = s[i];
  } else {
    for (long long i = threadIdx.x; i < bytes; i += blockDim.x) dst[i] = src[i];
  }
}

// The piece at `off` of a segment's buffer; a sender's segment (no buffer,
// null) stays null at every offset, so that copy_bytes skips each of its
// pieces (null + off is a wild address from the second piece on).
__device__ const char* piece_of(const void* base, long long off) {
  return base == nullptr ? nullptr : static_cast<const char*>(base) + off;
}
__device__ char* piece_of(void* base, long long off) {
  return base == nullptr ? nullptr : static_cast<char*>(base) + off;
}

__global__ void paced_copy_kernel(SegmentBatch batch, PaceParams pace) {
  __shared__ unsigned long long t0;
  if (threadIdx.x == 0) t0 = globaltimer();
  __syncthreads();
  const long long piece = pace.piece_bytes;
  // A rank's segment to itself is a local copy (as in NCCL): not paced.
  long long index = 0;
  for (int i = 0; i < batch.n; ++i) {
    const CopySegment& sg = batch.seg[i];
    if (sg.paced) continue;
    for (long long off = 0; off < sg.bytes; off += piece, ++index)
      if (index % static_cast<long long>(gridDim.x) == static_cast<long long>(blockIdx.x))
        copy_bytes(piece_of(sg.src, off), piece_of(sg.dst, off), sg.bytes - off < piece ? sg.bytes - off : piece);
  }
  __syncthreads();
  wait_until(t0 + static_cast<unsigned long long>(pace.latency_ns));
  long long done = 0;
  index = 0;
  for (int i = 0; i < batch.n; ++i) {
    const CopySegment& sg = batch.seg[i];
    if (!sg.paced) continue;
    for (long long off = 0; off < sg.bytes; off += piece, ++index) {
      if (index % pace.blocks != static_cast<long long>(blockIdx.x)) continue;
      const long long len = sg.bytes - off < piece ? sg.bytes - off : piece;
      copy_bytes(piece_of(sg.src, off), piece_of(sg.dst, off), len);
      done += len;
      __syncthreads();
      wait_until(t0 + static_cast<unsigned long long>(pace_deadline_ns(pace, done)));
    }
  }
}

template <class T>
__global__ void paced_reduce_kernel(SourceBatch srcs, T* __restrict__ dst, long long n, PaceParams pace) {
  __shared__ unsigned long long t0;
  if (threadIdx.x == 0) t0 = globaltimer();
  __syncthreads();
  wait_until(t0 + static_cast<unsigned long long>(pace.latency_ns));
  const long long piece = pace.piece_bytes / static_cast<long long>(sizeof(T));
  const long long remote = srcs.n > 1 ? srcs.n - 1 : 0;
  long long done = 0;
  for (long long p = blockIdx.x; p * piece < n; p += static_cast<long long>(gridDim.x)) {
    const long long begin = p * piece;
    const long long end = begin + piece < n ? begin + piece : n;
    for (long long i = begin + threadIdx.x; i < end; i += blockDim.x) {
      float acc = 0.0f;
      for (int j = 0; j < srcs.n; ++j) acc += load(static_cast<const T*>(srcs.src[j]) + i);
      store(dst + i, acc);
    }
    done += (end - begin) * static_cast<long long>(sizeof(T)) * remote;
    __syncthreads();
    wait_until(t0 + static_cast<unsigned long long>(pace_deadline_ns(pace, done)));
  }
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

void gate_softmax_topk(cudaStream_t s, const float* logits, std::int64_t tokens, int experts,
                       int top_k, float* probs, float* routing, const std::int32_t* planned,
                       unsigned long long* counts) {
  if (tokens <= 0) return;
  gate_softmax_topk_kernel<<<grid_for(tokens * 32), kThreads, 0, s>>>(logits, tokens, experts, top_k,
                                                                      probs, routing, planned, counts);
  check_launch("gate_softmax_topk");
}

void gate_backward_logits(cudaStream_t s, const float* probs, const float* routing,
                          const float* d_weights, std::int64_t tokens, int experts, int top_k,
                          void* d_logits, DType out) {
  if (tokens <= 0) return;
  if (out == DType::kBf16)
    gate_backward_kernel<<<grid_for(tokens * 32), kThreads, 0, s>>>(probs, routing, d_weights, tokens, experts,
                                                                     top_k, as<__nv_bfloat16>(d_logits));
  else
    gate_backward_kernel<<<grid_for(tokens * 32), kThreads, 0, s>>>(probs, routing, d_weights, tokens, experts,
                                                                     top_k, as<float>(d_logits));
  check_launch("gate_backward_logits");
}

void routing_maps(cudaStream_t s, const float* routing, std::int64_t tokens, int top_k,
                  const std::int64_t* table, int listed, int chunks, std::int32_t* positions,
                  std::int32_t* inverse, std::int64_t rows, unsigned long long* mismatches) {
  if (tokens > 0)
    ::moetrace::cupti::detail::check_cuda(
        cudaMemsetAsync(positions, 0xFF, static_cast<std::size_t>(tokens * top_k) * 4, s),
        "cudaMemsetAsync(positions)", __FILE__, __LINE__);
  if (rows > 0)
    ::moetrace::cupti::detail::check_cuda(cudaMemsetAsync(inverse, 0xFF, static_cast<std::size_t>(rows) * 4, s),
                                          "cudaMemsetAsync(inverse)", __FILE__, __LINE__);
  if (listed <= 0) return;
  // One block an expert scans every token: the widest block (32 warps,
  // warp_offset's size) takes the fewest serial steps.
  routing_maps_kernel<<<static_cast<unsigned>(listed), 1024, 0, s>>>(
      routing, tokens, top_k, reinterpret_cast<const long long*>(table), chunks, positions, inverse,
      mismatches);
  check_launch("routing_maps");
}

void permute_rows(cudaStream_t s, DType t, const void* x, std::int64_t cols, int top_k,
                  const std::int32_t* inverse, std::int64_t rows, void* out) {
  if (rows <= 0 || cols <= 0) return;
  by_type_and_width(t, cols, {x, out}, [&](auto type, auto width) {
    using T = typename decltype(type)::type;
    constexpr int V = decltype(width)::value;
    permute_rows_kernel<T, V><<<row_grid(rows, cols / V), kThreads, 0, s>>>(as<T>(x), cols, top_k, inverse, rows,
                                                                            as<T>(out));
  });
  check_launch("permute_rows");
}

void permute_backward(cudaStream_t s, DType t, const void* d_permuted, std::int64_t cols,
                      const std::int32_t* positions, std::int64_t tokens, int top_k, void* dx) {
  if (tokens <= 0 || cols <= 0) return;
  by_type_and_width(t, cols, {d_permuted, dx}, [&](auto type, auto width) {
    using T = typename decltype(type)::type;
    constexpr int V = decltype(width)::value;
    permute_backward_kernel<T, V><<<row_grid(tokens, cols / V), kThreads, 0, s>>>(as<T>(d_permuted), cols,
                                                                                  positions, tokens, top_k, as<T>(dx));
  });
  check_launch("permute_backward");
}

void unpermute(cudaStream_t s, DType t, const void* combined, const float* routing,
               const std::int32_t* positions, std::int64_t tokens, int top_k, std::int64_t cols,
               void* y) {
  if (tokens <= 0 || cols <= 0) return;
  by_type_and_width(t, cols, {combined, y}, [&](auto type, auto width) {
    using T = typename decltype(type)::type;
    constexpr int V = decltype(width)::value;
    unpermute_kernel<T, V><<<row_grid(tokens, cols / V), kThreads, 0, s>>>(as<T>(combined), routing, positions,
                                                                           tokens, top_k, cols, as<T>(y));
  });
  check_launch("unpermute");
}

void unpermute_backward(cudaStream_t s, DType t, const void* dy, const void* combined,
                        const float* routing, const std::int32_t* positions,
                        const std::int32_t* inverse, std::int64_t tokens, int top_k,
                        std::int64_t rows, std::int64_t cols, void* d_combined, float* d_weights) {
  if (rows > 0 && cols > 0) {
    by_type_and_width(t, cols, {dy, d_combined}, [&](auto type, auto width) {
      using T = typename decltype(type)::type;
      constexpr int V = decltype(width)::value;
      unpermute_backward_rows_kernel<T, V><<<row_grid(rows, cols / V), kThreads, 0, s>>>(
          as<T>(dy), routing, inverse, top_k, rows, cols, as<T>(d_combined));
    });
    check_launch("unpermute_backward_rows");
  }
  const long long pairs = tokens * top_k;
  if (pairs <= 0) return;
  const unsigned blocks = static_cast<unsigned>(pairs < 65535 * 4 ? pairs : 65535 * 4);
  by_type_and_width(t, cols, {dy, combined}, [&](auto type, auto width) {
    using T = typename decltype(type)::type;
    constexpr int V = decltype(width)::value;
    unpermute_backward_weights_kernel<T, V><<<blocks, 128, 0, s>>>(as<T>(dy), as<T>(combined), positions, pairs,
                                                                   top_k, cols, d_weights);
  });
  check_launch("unpermute_backward_weights");
}

namespace {

// The grid: blocks over the longest span's vectors (at most 1024, the loop
// strides past them), one grid row per span.
dim3 span_grid(const SpanBatch& spans, std::int64_t hidden, int width) {
  long long longest = 0;
  for (int i = 0; i < spans.n; ++i) longest = longest > spans.count[i] ? longest : spans.count[i];
  const unsigned x = grid_for(longest * hidden / width);
  return dim3(x > 1024 ? 1024 : x, static_cast<unsigned>(spans.n));
}

bool spans_empty(const SpanBatch& spans) {
  for (int i = 0; i < spans.n; ++i)
    if (spans.count[i] > 0) return false;
  return true;
}

}  // namespace

void gelu_forward(cudaStream_t s, DType t, const void* middle, std::int64_t hidden,
                  const SpanBatch& spans, void* a) {
  if (spans.n <= 0 || hidden <= 0 || spans_empty(spans)) return;
  by_type_and_width(t, hidden, {middle, a}, [&](auto type, auto width) {
    using T = typename decltype(type)::type;
    constexpr int V = decltype(width)::value;
    gelu_forward_kernel<T, V><<<span_grid(spans, hidden, V), kThreads, 0, s>>>(as<T>(middle), hidden, spans,
                                                                                as<T>(a));
  });
  check_launch("gelu_forward");
}

void gelu_backward(cudaStream_t s, DType t, const void* middle, std::int64_t hidden,
                   const SpanBatch& spans, void* a, void* g) {
  if (spans.n <= 0 || hidden <= 0 || spans_empty(spans)) return;
  by_type_and_width(t, hidden, {middle, a, g}, [&](auto type, auto width) {
    using T = typename decltype(type)::type;
    constexpr int V = decltype(width)::value;
    gelu_backward_kernel<T, V><<<span_grid(spans, hidden, V), kThreads, 0, s>>>(as<T>(middle), hidden, spans,
                                                                                 as<T>(a), as<T>(g));
  });
  check_launch("gelu_backward");
}

void sgd_step(cudaStream_t s, DType t, void* params, float* grads, std::int64_t n, float lr) {
  if (n <= 0) return;
  // One element a thread. A version in 16-byte packs (8 bf16 parameters and
  // two float4 of gradients a thread) took 7.7 ms an iteration where this one
  // had taken 4.0 in the run before (940 M bf16 parameters, H200): not kept.
  if (t == DType::kBf16)
    sgd_kernel<<<grid_for(n), kThreads, 0, s>>>(as<__nv_bfloat16>(params), grads, n, lr);
  else
    sgd_kernel<<<grid_for(n), kThreads, 0, s>>>(as<float>(params), grads, n, lr);
  check_launch("sgd_step");
}

void fill_pointers(cudaStream_t s, const PointerBatch& batch, const void** device_array) {
  if (batch.n <= 0) return;
  fill_pointers_kernel<<<1, 3 * kMaxSpans, 0, s>>>(batch, device_array);
  check_launch("fill_pointers");
}

void paced_copy(cudaStream_t s, const SegmentBatch& batch, const PaceParams& pace) {
  // With nothing to move a transfer still costs its latency (alpha).
  if (batch.n <= 0 && pace.latency_ns <= 0) return;
  paced_copy_kernel<<<static_cast<unsigned>(pace.blocks < 1 ? 1 : pace.blocks), kThreads, 0, s>>>(batch, pace);
  check_launch("paced_copy");
}

void softmax_rows(cudaStream_t s, DType t, void* data, std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  if (t == DType::kBf16)
    softmax_rows_kernel<<<grid_for(rows * 32), kThreads, 0, s>>>(as<__nv_bfloat16>(data), rows, cols);
  else
    softmax_rows_kernel<<<grid_for(rows * 32), kThreads, 0, s>>>(as<float>(data), rows, cols);
  check_launch("softmax_rows");
}

void softmax_rows_backward(cudaStream_t s, DType t, const void* probs, void* grad, std::int64_t rows,
                           std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  if (t == DType::kBf16)
    softmax_rows_backward_kernel<<<grid_for(rows * 32), kThreads, 0, s>>>(as<__nv_bfloat16>(probs),
                                                                           as<__nv_bfloat16>(grad), rows, cols);
  else
    softmax_rows_backward_kernel<<<grid_for(rows * 32), kThreads, 0, s>>>(as<float>(probs), as<float>(grad), rows,
                                                                           cols);
  check_launch("softmax_rows_backward");
}

void plan_search(cudaStream_t s, const float* routing, std::int64_t tokens, int top_k, int experts, int devices,
                 int* counts) {
  if (experts <= 0 || devices <= 0 || experts + devices > kPlanSearchMaxSlots) return;
  const std::size_t shared = static_cast<std::size_t>(experts + devices) * sizeof(long long);
  plan_search_kernel<<<1, kThreads, shared, s>>>(routing, tokens, top_k, experts, devices, counts);
  check_launch("plan_search");
}

void fill_normal(cudaStream_t s, DType t, void* dst, std::int64_t n, std::uint64_t seed, std::uint64_t first) {
  if (n <= 0) return;
  if (t == DType::kBf16)
    fill_normal_kernel<<<grid_for(n), kThreads, 0, s>>>(as<__nv_bfloat16>(dst), n, seed, first);
  else
    fill_normal_kernel<<<grid_for(n), kThreads, 0, s>>>(as<float>(dst), n, seed, first);
  check_launch("fill_normal");
}

void paced_reduce(cudaStream_t s, DType t, const SourceBatch& srcs, void* dst, std::int64_t n,
                  const PaceParams& pace) {
  if (n <= 0 || srcs.n <= 0) return;
  const unsigned blocks = static_cast<unsigned>(pace.blocks < 1 ? 1 : pace.blocks);
  if (t == DType::kBf16)
    paced_reduce_kernel<<<blocks, kThreads, 0, s>>>(srcs, as<__nv_bfloat16>(dst), n, pace);
  else
    paced_reduce_kernel<<<blocks, kThreads, 0, s>>>(srcs, as<float>(dst), n, pace);
  check_launch("paced_reduce");
}

}  // namespace moetrace::cuda::kernels
