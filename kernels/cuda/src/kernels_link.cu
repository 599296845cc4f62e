// The emulated link's kernels: a paced copy and a paced reduce between
// per-rank buffers on one GPU, at the link model's latency and bandwidth
// (kernels.h, emulated_communicator.cc).
#include "kernels_common.cuh"

namespace moetrace::cuda::kernels {
namespace {

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

}  // namespace

void paced_copy(cudaStream_t s, const SegmentBatch& batch, const PaceParams& pace) {
  // With nothing to move a transfer still costs its latency (alpha).
  if (batch.n <= 0 && pace.latency_ns <= 0) return;
  paced_copy_kernel<<<static_cast<unsigned>(pace.blocks < 1 ? 1 : pace.blocks), kThreads, 0, s>>>(batch, pace);
  check_launch("paced_copy");
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
