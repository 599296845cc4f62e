#include "fixture_trace.h"

#include <unistd.h>

#include <filesystem>

#include "moetrace/instrument/trace_writer.h"

namespace moetrace::gui::testing {

using namespace moetrace::instrument;

std::string temp_path(const std::string& name) {
  // Per process: test runs of several checkouts share the machine's /tmp.
  struct Dir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("moetrace_gui_tests_" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ignored;
      std::filesystem::remove_all(path, ignored);
    }
  };
  static const Dir dir;
  return (dir.path / name).string();
}

void write_fixture_trace(const std::string& path) {
  RunRecord run;
  run.name = "gui fixture";
  run.backend = "synthetic";
  run.variant = "pipemoe";
  run.simulated = true;
  run.world_size = 2;
  TraceWriter w(path, run);
  w.add(DeviceRecord{DeviceId(0), "Test GPU", "", 9, 0, 132, 80LL << 30, true});
  for (int l = 0; l < 2; ++l) {
    LayerRecord layer{.layer = l, .num_experts = 4, .top_k = 2};
    w.add(layer);
  }
  const StringId launch = w.intern("cudaLaunchKernel");
  std::int64_t correlation = 1;
  for (int r = 0; r < 2; ++r) {
    const RankId rank(r);
    w.add(RankRecord{rank, DeviceId(0), r, "host", 100 + r});
    const StreamId compute(10 * r + 1), comm(10 * r + 2), copy(10 * r + 3);
    w.add(StreamRecord{compute, rank, DeviceId(0), 7, kRoleCompute, "compute", 0});
    w.add(StreamRecord{comm, rank, DeviceId(0), 13, kRoleComm, "nccl", 0});
    w.add(StreamRecord{copy, rank, DeviceId(0), 14, kRoleCopy, "copy", 0});

    auto op = [&](OpKind kind, StreamId s, int layer, int chunk, Phase phase, double b, double e) {
      OpRangeRecord o;
      o.rank = rank;
      o.stream = s;
      o.kind = kind;
      o.layer = layer;
      o.iteration = 0;
      o.chunk = chunk;
      o.phase = phase;
      o.start_ns = us(b);
      o.end_ns = us(e);
      return w.add(o);
    };
    auto kernel = [&](OpId o, StreamId s, const char* name, double b, double e) {
      KernelRecord k;
      k.rank = rank;
      k.stream = s;
      k.start_ns = us(b);
      k.end_ns = us(e);
      k.name = w.intern(name);
      k.correlation_id = correlation;
      k.grid = {128, 1, 1};
      k.block = {256, 1, 1};
      k.op = o;
      w.add(k);
      ApiCallRecord a;
      a.rank = rank;
      a.thread_id = 1000 + r;
      a.start_ns = us(b - 4);
      a.end_ns = us(b - 2);
      a.name = launch;
      a.correlation_id = correlation++;
      w.add(a);
    };
    const auto F = Phase::kForward, B = Phase::kBackward;
    // Layer 0 forward.
    kernel(op(OpKind::kGate, compute, 0, -1, F, 0, 10), compute, "gate_gemm", 0, 10);
    kernel(op(OpKind::kDispatchAllToAll, comm, 0, -1, F, 10, 30), comm, "ncclDevKernel_AllToAll", 10, 30);
    const OpId expert0 = op(OpKind::kExpertFfn, compute, 0, -1, F, 30, 60);
    kernel(expert0, compute, "expert_gemm1", 30, 45);
    kernel(expert0, compute, "expert_gemm2", 45, 60);
    kernel(op(OpKind::kCombineAllToAll, comm, 0, -1, F, 60, 80), comm, "ncclDevKernel_AllToAll", 60, 80);
    MemcpyRecord m;
    m.rank = rank;
    m.stream = copy;
    m.start_ns = us(60);
    m.end_ns = us(90);
    m.bytes = 1 << 20;
    m.copy_kind = schema::CopyKind::kDeviceToHost;
    m.op = op(OpKind::kOffload, copy, 0, -1, F, 60, 90);
    w.add(m);
    // Layer 1 forward, two overlapping chunks.
    kernel(op(OpKind::kGate, compute, 1, -1, F, 100, 110), compute, "gate_gemm", 100, 110);
    for (int c = 0; c < 2; ++c) {
      const double d = 10.0 * c, e = 20.0 * c;
      kernel(op(OpKind::kDispatchAllToAll, comm, 1, c, F, 110 + d, 120 + d), comm, "ncclDevKernel_AllToAll",
             110 + d, 120 + d);
      kernel(op(OpKind::kExpertFfn, compute, 1, c, F, 120 + e, 140 + e), compute, "expert_gemm1", 120 + e, 140 + e);
      kernel(op(OpKind::kCombineAllToAll, comm, 1, c, F, 140 + e, 150 + e), comm, "ncclDevKernel_AllToAll",
             140 + e, 150 + e);
    }
    // Layer 1 backward.
    kernel(op(OpKind::kMoeAllReduce, comm, 1, -1, B, 200, 230), comm, "ncclDevKernel_AllReduce", 200, 230);
    kernel(op(OpKind::kExpertFfn, compute, 1, -1, B, 230, 260), compute, "expert_gemm_bwd", 230, 260);
    if (r == 0) {
      kernel(OpId(), compute, "ncclDevKernel_AllReduce_Sum", 300, 310);
      auto mem = [&](double t, bool alloc, std::uint64_t addr, std::int64_t bytes) {
        MemoryEventRecord e;
        e.rank = rank;
        e.ts_ns = us(t);
        e.alloc = alloc;
        e.address = addr;
        e.bytes = bytes;
        w.add(e);
      };
      mem(0, true, 0x1000, 4 << 20);
      mem(100, true, 0x900000, 2 << 20);
      mem(200, false, 0x1000, 4 << 20);
    }
  }
  const int load[3][2][4] = {{{10, 20, 30, 40}, {5, 5, 5, 5}}, {{0, 0, 100, 0}, {1, 2, 3, 4}}, {{1, 1, 1, 1}, {0, 0, 0, 0}}};
  for (int e = 0; e < 4; ++e) {
    for (int src = 0; src < 2; ++src) {
      w.add(ExpertLoadRecord{0, 0, src, e, load[0][src][e]});
      w.add(ExpertLoadRecord{0, 1, src, e, load[1][src][e]});
    }
    w.add(ExpertLoadRecord{1, 0, 0, e, load[2][0][e]});
  }
  w.close();
}

}  // namespace moetrace::gui::testing
