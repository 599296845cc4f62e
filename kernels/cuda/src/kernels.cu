// The executor's own kernels: gating softmax/top-k and its backward, the
// routing index maps, permute/unpermute and their backward (GeLU, SGD,
// softmax, the plan search and fills: kernels_elementwise.cu; the emulated
// link's paced copy/reduce: kernels_link.cu). GEMMs are cuBLAS (gemm.cc).
// Row-wise kernels put rows on grid.y (strided past 65535) and columns on
// grid.x, so a row's index data is read once per block.
#include "kernels_common.cuh"

namespace moetrace::cuda::kernels {
namespace {

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

}  // namespace moetrace::cuda::kernels
