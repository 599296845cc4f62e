// Small traces described as text, for golden tests. One record per line:
//
//   run    world_size=2 backend=test variant=dpmoe
//   stream id=0 rank=0 role=compute
//   op     id=1 rank=0 stream=0 kind=gate layer=0 iteration=0 phase=fwd start=0 end=100
//          (optional: micro_batch chunk bytes recv_bytes flops peer launch_start launch_end nvtx)
//   kernel rank=0 stream=0 start=0 end=50 name=gemm corr=7 op=1
//   memcpy rank=0 stream=2 start=0 end=50 bytes=4096 copy_kind=2 src_kind=1 dst_kind=2
//   memset rank=0 stream=0 start=0 end=10 bytes=64 corr=9
//   api    rank=0 thread=1 start=0 end=5 name=cudaLaunchKernel corr=7
//   nvtx   rank=0 thread=1 start=0 end=90 domain=moetrace name=L0.gate payload=1
//          (ids are 1, 2, ... in file order; an op names one with nvtx=ID;
//          dims=[[8,64],[64,128]] types=["float","float"]: recorded input shapes)
//   device id=0 name=NVIDIA_H100_80GB_HBM3   (underscores stand for spaces; a stream's device=, default its rank)
//   layer  layer=0 experts=4 top_k=1 model_dim=1024 hidden_dim=4096 tokens=8192
//   collective rank=0 start=0 end=50 name=all_to_all group_size=4 corr=7   (Kineto's record of an NCCL kernel)
//     [process_group=DESCRIPTION group_ranks=[0,4] in_nelems=N]
//   config model.elem_bytes=2 partitions=4      (run_config entries)
//   alloc  rank=0 ts=0 address=4096 bytes=1024 buffer=1 memory_kind=1  (free: same keys)
//   buffer id=1 rank=0 tag=T_DI bytes=1024 layer=0 alloc=0 free=500
//   use    op=1 buffer=1 access=rw
//   load   iteration=0 layer=0 src=0 expert=1 tokens=30
//   place  iteration=0 layer=0 expert=1 rank=0 role=home
//   dep    op=2 on=1
//
// '#' starts a comment. Unknown record types or keys throw, so a typo in a
// fixture fails the test instead of silently changing it.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>

namespace moetrace::testing {

void write_text_trace(const std::string& path, std::string_view text);

// A fresh path in the test's temporary directory (removed with it).
std::string temp_path(std::string_view name);

// The whole of a file, as bytes ("" where it cannot be read).
std::string read_text(const std::string& path);

// The `load` lines of one layer in one iteration, from its routing matrix:
// tokens[src][expert] is what source rank src sends to the expert; a zero
// writes no line. Lines go by source rank, then expert.
std::string load_lines(int iteration, int layer, std::initializer_list<std::initializer_list<int>> tokens);

// Runs `sql` (one or more statements) on the trace at `path`, as damage done
// to the file after the writer closed it.
void alter_trace(const std::string& path, std::string_view sql);

// One rank, one gate op and nothing else.
inline constexpr std::string_view kOneGateOp = R"(
run    world_size=1 backend=test variant=dpmoe
stream id=0 rank=0 role=compute
op     id=1 rank=0 stream=0 kind=gate layer=0 iteration=0 phase=fwd start=0 end=100
)";

// One MoE layer on one rank, 1000 ns (breakdown_test.cc derives its shares):
//   gate [0, 100), dispatch [100, 300) comm, expert [300, 700),
//   combine [600, 800) comm, unpermute [800, 1000).
// All-to-all 400 ns = 40 % of the layer; 100 ns of it hidden under the expert.
inline constexpr std::string_view kFortyPercentLayer = R"(
  stream id=0 rank=0 role=compute
  stream id=1 rank=0 role=comm
  op rank=0 stream=0 kind=gate layer=0 iteration=0 start=0 end=100
  op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=100 end=300
  op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=300 end=700
  op rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 start=600 end=800
  op rank=0 stream=0 kind=unpermute layer=0 iteration=0 start=800 end=1000
)";

// One MoE layer on two ranks, rank 0 an H100 SXM, rank 1 an A100 SXM 80GB
// (efficiency_test.cc and the GUI's Efficiency panel test derive its figures):
//   rank 0: dispatch [0, 1000) 400,000 B; expert [1000, 2000) 4e8 FLOPs and
//           [1500, 3000) 6e8 FLOPs; combine [3000, 4000) 400,000 B;
//           tensor-parallel all-reduce [4000, 5000) 300,000 B (no layer)
//   rank 1: dispatch [600, 1600) 400,000 B; expert [1600, 3600) 2e8 FLOPs;
//           combine [3600, 4000) 400,000 B; all-reduce [4000, 5000) 300,000 B
inline constexpr std::string_view kTwoGpus = R"(
  run world_size=2
  device id=0 name=NVIDIA_H100_80GB_HBM3
  device id=1 name=NVIDIA_A100-SXM4-80GB
  stream id=0 rank=0 device=0 role=compute
  stream id=1 rank=0 device=0 role=comm
  stream id=2 rank=1 device=1 role=compute
  stream id=3 rank=1 device=1 role=comm
  op rank=0 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 start=0 end=1000 bytes=400000
  op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=1000 end=2000 flops=4e8
  op rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 start=1500 end=3000 flops=6e8
  op rank=0 stream=1 kind=combine_all_to_all layer=0 iteration=0 start=3000 end=4000 bytes=400000
  op rank=0 stream=1 kind=tp_all_reduce iteration=0 start=4000 end=5000 bytes=300000
  op rank=1 stream=3 kind=dispatch_all_to_all layer=0 iteration=0 start=600 end=1600 bytes=400000
  op rank=1 stream=2 kind=expert_ffn layer=0 iteration=0 start=1600 end=3600 flops=2e8
  op rank=1 stream=3 kind=combine_all_to_all layer=0 iteration=0 start=3600 end=4000 bytes=400000
  op rank=1 stream=3 kind=tp_all_reduce iteration=0 start=4000 end=5000 bytes=300000
)";

}  // namespace moetrace::testing
