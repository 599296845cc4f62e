// The executor's element-wise kernels: GeLU over row spans and its backward,
// SGD, softmax over rows, the on-device placement plan search, and filling
// buffers (kernels.h).
#include "kernels_common.cuh"

namespace moetrace::cuda::kernels {
namespace {

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

}  // namespace

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
  by_type(t, [&](auto type) {
    using T = typename decltype(type)::type;
    sgd_kernel<<<grid_for(n), kThreads, 0, s>>>(as<T>(params), grads, n, lr);
  });
  check_launch("sgd_step");
}

void fill_pointers(cudaStream_t s, const PointerBatch& batch, const void** device_array) {
  if (batch.n <= 0) return;
  fill_pointers_kernel<<<1, 3 * kMaxSpans, 0, s>>>(batch, device_array);
  check_launch("fill_pointers");
}

void softmax_rows(cudaStream_t s, DType t, void* data, std::int64_t rows, std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  by_type(t, [&](auto type) {
    using T = typename decltype(type)::type;
    softmax_rows_kernel<<<grid_for(rows * 32), kThreads, 0, s>>>(as<T>(data), rows, cols);
  });
  check_launch("softmax_rows");
}

void softmax_rows_backward(cudaStream_t s, DType t, const void* probs, void* grad, std::int64_t rows,
                           std::int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
  by_type(t, [&](auto type) {
    using T = typename decltype(type)::type;
    softmax_rows_backward_kernel<<<grid_for(rows * 32), kThreads, 0, s>>>(as<T>(probs), as<T>(grad), rows, cols);
  });
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
  by_type(t, [&](auto type) {
    using T = typename decltype(type)::type;
    fill_normal_kernel<<<grid_for(n), kThreads, 0, s>>>(as<T>(dst), n, seed, first);
  });
  check_launch("fill_normal");
}

}  // namespace moetrace::cuda::kernels
