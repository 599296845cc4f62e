// The fixture trace of the GUI tests, written with TraceWriter from the
// description below so that every expected number can be derived by hand.
//
// Times are microseconds after kBaseNs (1 ms). Two ranks run the same
// schedule; rank r's streams are 10r+1 compute, 10r+2 comm, 10r+3 copy.
//
//   layer 0, iteration 0, fwd (no chunks)
//     gate            compute  [  0,  10)  kernel gate_gemm
//     dispatch a2a    comm     [ 10,  30)  kernel ncclDevKernel_AllToAll
//     expert_ffn      compute  [ 30,  60)  kernels expert_gemm1 [30,45), expert_gemm2 [45,60)
//     combine a2a     comm     [ 60,  80)  kernel ncclDevKernel_AllToAll
//     offload         copy     [ 60,  90)  memcpy DtoH 1 MiB
//   layer 1, iteration 0, fwd, chunks 0 and 1 overlapping (PipeMoE r = 2)
//     gate            compute  [100, 110)  kernel gate_gemm (no chunk)
//     dispatch c0     comm     [110, 120)   dispatch c1  comm    [120, 130)
//     expert c0       compute  [120, 140)   expert c1    compute [140, 160)
//     combine c0      comm     [140, 150)   combine c1   comm    [160, 170)
//   layer 1, iteration 0, bwd
//     moe_all_reduce  comm     [200, 230)  kernel ncclDevKernel_AllReduce
//     expert_ffn      compute  [230, 260)  kernel expert_gemm_bwd
//   rank 0 only: a kernel no op claims, ncclDevKernel_AllReduce_Sum, compute [300, 310)
//   rank 0 only: memory: alloc 4 MiB at 0, alloc 2 MiB at 100, free the 4 MiB at 200
//   every kernel has a cudaLaunchKernel API call [start - 4, start - 2) with its correlation id
//   expert load, tokens per (iteration, layer, src rank, expert 0..3):
//     it 0 L0: rank 0 {10,20,30,40}, rank 1 {5,5,5,5}   -> sums {15,25,35,45}
//     it 0 L1: rank 0 {0,0,100,0},   rank 1 {1,2,3,4}   -> sums {1,2,103,4}
//     it 1 L0: rank 0 {1,1,1,1}                          -> sums {1,1,1,1}; it 1 L1 absent
#pragma once

#include <cstdint>
#include <string>

namespace moetrace::gui::testing {

inline constexpr std::int64_t kBaseNs = 1'000'000;
inline constexpr std::int64_t us(double v) { return kBaseNs + static_cast<std::int64_t>(v * 1000); }

// Writes the fixture to `path` (overwriting it).
void write_fixture_trace(const std::string& path);

// A path in this process's temporary directory.
std::string temp_path(const std::string& name);

}  // namespace moetrace::gui::testing
