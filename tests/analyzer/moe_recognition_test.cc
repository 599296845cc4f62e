// MoE recognition on traces recorded by other tools: hand-built Kineto and
// Nsight Systems traces whose per-layer numbers are derived by hand beside
// each assertion. (Rule files and the annotation convention:
// moe_rules_test.cc; one step in every framework's convention:
// moe_conventions_test.cc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli_run.h"
#include "import_test_util.h"
#include "kineto_fixture.h"
#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/moe_recognition.h"
#include "moetrace/analyzer/trace.h"
#include "test_paths.h"

namespace moetrace::testing {
namespace {

// --- hand-built Kineto traces --------------------------------------------------

// DualPipe-style overlap, annotated with the convention: the forward
// dispatch and combine of micro-batch 0 of layer 0 run on the comm stream
// while the backward expert GEMMs of micro-batch 1 (and the forward expert
// GEMM of micro-batch 0) run on the compute stream.
//   comm stream 13:    dispatch mb0 [100,200]           combine mb0 [300,400]
//   compute stream 7:  bwd mb1 [120,180]  fwd mb0 [200,300]  bwd mb1 [320,350]
// Forward row of layer 0 (mb0): window [100,400] = 300 us; all-to-all
// [100,200]+[300,400] = 200 us; expert 100 us. Hidden communication: the
// all-to-all under any computation of the rank = [120,180] + [320,350] =
// 90 us, so hidden fraction 0.45, exposed 110 us. Backward row (mb1): window
// [120,350] = 230 us, expert 60 + 30 = 90 us, no communication; idle
// [180,320] minus what ran ([180,200] comm, [200,300] fwd expert, [300,320]
// comm) = 0.
TEST(MoeRecognition, DualPipeOverlapHiddenFractionPerLayer) {
  Kineto k;
  k.range("ProfilerStep#3", 0, 1000);
  k.range("moetrace:layer layer=0", 5, 60);
  k.range("moetrace:dispatch mb=0 phase=fwd", 10, 5);
  k.kernel(kA2a, 13, 100, 100, 11);
  k.range("moetrace:expert mb=1 phase=bwd", 20, 5);
  k.kernel("sm90_xmma_gemm_bf16_bwd", 7, 120, 60, 21);
  k.range("moetrace:expert mb=0 phase=fwd", 30, 5);
  k.kernel("sm90_xmma_gemm_bf16_fwd", 7, 200, 100, 31);
  k.range("moetrace:combine mb=0 phase=fwd", 40, 5);
  k.kernel(kA2a, 13, 300, 100, 41);
  k.range("moetrace:expert mb=1 phase=bwd", 50, 5);
  k.kernel("sm90_xmma_gemm_bf16_bwd", 7, 320, 30, 51);
  const auto t = import_and_load({k.write("dualpipe.json")}, temp_path("dualpipe.db"));
  ASSERT_TRUE(t.recognition.ran);
  EXPECT_TRUE(t.recognition.moe);
  EXPECT_EQ(t.recognition.activities_placed, 5);
  EXPECT_EQ(t.recognition.annotations, 6);
  EXPECT_EQ(op_of_kernel(t, kA2a, 100).kind, OpKind::kDispatchAllToAll);
  EXPECT_EQ(op_of_kernel(t, kA2a, 300).kind, OpKind::kCombineAllToAll);
  const auto& bwd = op_of_kernel(t, "sm90_xmma_gemm_bf16_bwd", 320);
  EXPECT_EQ(bwd.kind, OpKind::kExpertFfn);
  EXPECT_EQ(bwd.phase, Phase::kBackward);
  EXPECT_EQ(bwd.micro_batch, 1);
  EXPECT_EQ(bwd.layer, 0);
  EXPECT_EQ(bwd.iteration, 3);

  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.layers.size(), 1u);
  const auto& f = b.layers[0].forward;
  expect_times(f, 300'000, {{Category::kAllToAll, 200'000}, {Category::kExpertCompute, 100'000}});
  EXPECT_EQ(f.comm_hidden_ns, 90'000);
  EXPECT_EQ(f.comm_exposed_ns, 110'000);
  EXPECT_DOUBLE_EQ(f.hidden_fraction(), 0.45);
  const auto& bw = b.layers[0].backward;
  expect_times(bw, 230'000, {{Category::kExpertCompute, 90'000}});
  EXPECT_EQ(bw.comm_ns, 0);
  EXPECT_EQ(bw.idle_ns, 0);
}

// Megatron-Core with with_modules=True: module ranges only, an NCCL
// all-to-all pair per MoE layer that no range names (the token dispatcher is
// no module), backward on the autograd thread (tid 2). Two MoE layers.
//   forward, layer instance 0 (MoELayer_0 [10,40]):  router gemm [100,110],
//     a2a [110,130] (split sizes [3,5]), experts gemm [130,170], a2a [170,190]
//   forward, layer instance 1 (MoELayer_1 [50,80]):  router [200,210],
//     a2a [210,220] ([6,2]), experts [220,240], a2a [240,250]
//   backward (tid 2, evaluate_function ranges): a2a [300,310], gemm [310,330],
//     a2a [330,340] (the last forward layer first), then a2a [350,360],
//     gemm [360,380], a2a [380,390].
// By hand: in each forward instance the first all-to-all is the dispatch and
// the second the combine; backward instance 0 is layer 1 (the last forward
// layer), its first all-to-all the backward of the combine. Rank load of
// layer 0: [3,5] elements to ranks 0 and 1; layer 1: [6,2].
// Forward MoE layer instance `i` as Megatron-Core's modules record it:
// MoELayer_i from host time `host` (30 us), TopKRouter_i inside it at +1 and
// TEGroupedMLP_i at +10; on the GPU from `gpu`: the router GEMM (10 us,
// launched at host + 2), the dispatch all-to-all (`a2a` us, its split sizes;
// host + 5), the experts' grouped GEMM (`gemm` us; host + 11), the combine
// all-to-all (`a2a` us; host + 25).
void megatron_forward_layer(Kineto& k, int i, double host, double gpu, double a2a, double gemm,
                            const char* in_split, const char* out_split) {
  const auto module = [&](const std::string& name, double at, double dur) {
    k.range("nn.Module: " + name + "_" + std::to_string(i), at, dur, 1, "python_function");
  };
  module("MoELayer", host, 30);
  module("TopKRouter", host + 1, 3);
  k.kernel("router_gemm", 7, gpu, 10, host + 2);
  k.kernel(kA2a, 13, gpu + 10, a2a, host + 5, 1,
           {{"Collective name", "all_to_allv"}, {"In split size", in_split}, {"Out split size", out_split},
            {"In msg nelems", 8}, {"dtype", "BFloat16"}});
  module("TEGroupedMLP", host + 10, 10);
  k.kernel("cutlass_grouped_gemm_kernel", 7, gpu + 10 + a2a, gemm, host + 11);
  k.kernel(kA2a, 13, gpu + 10 + a2a + gemm, a2a, host + 25);
}

// The rank load of `t` as (layer, expert, tokens), one per row, in the
// trace's order (iteration, layer, source rank, expert).
std::vector<std::array<std::int64_t, 3>> layer_expert_tokens(const analyzer::Trace& t) {
  std::vector<std::array<std::int64_t, 3>> rows;
  for (const auto& l : t.expert_load) rows.push_back({l.layer, l.expert, l.tokens});
  return rows;
}

TEST(MoeRecognition, MegatronModulesOrderGivesLayersAndDirections) {
  Kineto k;
  k.range("ProfilerStep#7", 0, 1000);
  megatron_forward_layer(k, 0, 10, 100, 20, 40, "[3, 5]", "[3, 4]");
  megatron_forward_layer(k, 1, 50, 200, 10, 20, "[6, 2]", "[1, 1]");
  // Backward on the autograd thread: each autograd function's range (5 us
  // from `host`) and the kernel it launches at host + 1.
  const auto backward = [&](const char* function, const char* kernel, int stream, double host, double gpu,
                            double dur) {
    k.range(std::string("autograd::engine::evaluate_function: ") + function, host, 5, 2, "cpu_op");
    k.kernel(kernel, stream, gpu, dur, host + 1, 2);
  };
  backward("_AllToAllBackward", kA2a, 13, 100, 300, 10);
  backward("GroupedGemmBackward", "cutlass_grouped_gemm_kernel", 7, 110, 310, 20);
  backward("_AllToAllBackward", kA2a, 13, 120, 330, 10);
  backward("_AllToAllBackward", kA2a, 13, 130, 350, 10);
  backward("GroupedGemmBackward", "cutlass_grouped_gemm_kernel", 7, 140, 360, 20);
  backward("_AllToAllBackward", kA2a, 13, 150, 380, 10);
  const auto t = import_and_load({k.write("megatron.json")}, temp_path("megatron.db"));
  ASSERT_TRUE(t.recognition.moe);
  EXPECT_TRUE(t.recognition.ambiguities.empty()) << t.recognition.ambiguities.front();
  const auto& d0 = op_of_kernel(t, kA2a, 110);
  EXPECT_EQ(d0.kind, OpKind::kDispatchAllToAll);
  EXPECT_EQ(d0.layer, 0);
  EXPECT_EQ(d0.iteration, 7);
  EXPECT_EQ(d0.bytes, 16);  // 8 elements x 2 bytes (BFloat16)
  EXPECT_EQ(op_of_kernel(t, kA2a, 170).kind, OpKind::kCombineAllToAll);
  EXPECT_EQ(op_of_kernel(t, kA2a, 210).layer, 1);
  EXPECT_EQ(op_of_kernel(t, kA2a, 240).kind, OpKind::kCombineAllToAll);
  EXPECT_EQ(op_of_kernel(t, "router_gemm", 200).kind, OpKind::kGate);
  EXPECT_EQ(op_of_kernel(t, "cutlass_grouped_gemm_kernel", 220).kind, OpKind::kExpertFfn);
  // Backward: the first instance is layer 1, its first all-to-all the combine's backward.
  const auto& b0 = op_of_kernel(t, kA2a, 300);
  EXPECT_EQ(b0.phase, Phase::kBackward);
  EXPECT_EQ(b0.layer, 1);
  EXPECT_EQ(b0.kind, OpKind::kCombineAllToAll);
  EXPECT_EQ(op_of_kernel(t, kA2a, 330).kind, OpKind::kDispatchAllToAll);
  EXPECT_EQ(op_of_kernel(t, "cutlass_grouped_gemm_kernel", 360).layer, 0);
  EXPECT_EQ(op_of_kernel(t, kA2a, 380).layer, 0);
  // Rank load from the forward dispatches' split sizes: layer 0 [3,5],
  // layer 1 [6,2], the expert being the rank sent to.
  EXPECT_EQ(layer_expert_tokens(t),
            (std::vector<std::array<std::int64_t, 3>>{{0, 0, 3}, {0, 1, 5}, {1, 0, 6}, {1, 1, 2}}));
  EXPECT_FALSE(t.expert_load_origin.empty());
  EXPECT_TRUE(t.expert_load_by_rank);  // one column per destination rank
  // `moetrace merge` writes the trace as recorded; its reader recognises it
  // again and reads the same rank load.
  const auto merged = temp_path("megatron-merged.db");
  const auto r = run_cli("merge " + temp_path("megatron.db") + " -o " + merged);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto m = analyzer::load_trace(merged);
  EXPECT_TRUE(m.expert_load_by_rank);
  EXPECT_EQ(m.expert_load_origin, t.expert_load_origin);
  EXPECT_EQ(layer_expert_tokens(m), layer_expert_tokens(t));

  // The breakdown per layer: layer 0 forward window [100,190] = 90 us, all-to-all 40 us.
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.layers.size(), 2u);
  expect_times(b.layers[0].forward, 90'000, {{Category::kAllToAll, 40'000}, {Category::kGating, 10'000}});
  // Layer 0 backward: [350,390] = 40 us, all-to-all 20 us.
  expect_times(b.layers[0].backward, 40'000, {{Category::kAllToAll, 20'000}});
}

// A DualPipe-style schedule: forward and backward chunks of different
// micro-batches overlap, and the schedule names only the parts of each MoE
// block (dispatch(F), mlp(B), ...) - no layer, no micro-batch. The Python
// tracer (with_stack=True) records the functions that run them: a chunk pair
// (forward chunk of one micro-batch and backward chunk of another), inside it
// one function per overlapped layer pair (forward layer l, backward layer
// L-1-l). Two layers; two chunk pairs, so four layer pairs p = 0..3 at GPU
// offset o = 100 + 40p us:
//   forward:  dispatch a2a s13 [o,o+10], expert gemm s7 [o+10,o+20], combine a2a s13 [o+20,o+30]
//   backward: combine a2a s14 [o,o+10],  expert gemm s8 [o+10,o+20], dispatch a2a s14 [o+20,o+30]
// By hand: forward layer of pair p is p % 2 (counted within its chunk), the
// backward one 1 - p % 2 (counting down); chunk pairs are micro-batch 0 and 1
// of each phase. Layer 0 forward runs in pairs 0 and 2 ([100,130], [180,210]),
// backward in pairs 1 and 3 ([140,170], [220,250]): its time in the iteration
// is their union, 120 us, within the iteration's 150 us; all its work ran
// beside the other chunk's (overlap 100 %). Counting instances per iteration
// instead would give four layers.
TEST(MoeRecognition, OverlappedChunksLayersFromTheNestingOfTheirFunctions) {
  Kineto k;
  k.range("ProfilerStep#5", 0, 1000);
  const std::pair<const char*, int> parts[] = {  // part, phase (0 fwd, 1 bwd), in launch order
      {"dispatch(F)", 0}, {"combine(B)", 1}, {"mlp(F)", 0}, {"mlp(B)", 1}, {"combine(F)", 0}, {"dispatch(B)", 1}};
  for (int chunk = 0; chunk < 2; ++chunk) {
    const double ch = 10 + 90.0 * chunk;
    k.range("dualpipe/dualpipe.py(305): _forward_backward_chunk", ch, 80, 1, "python_function");
    for (int l = 0; l < 2; ++l) {
      const int pair = 2 * chunk + l;
      const double h = ch + 1 + 40.0 * l, o = 100 + 40.0 * pair;
      k.range("model.py(88): overlapped_layer", h, 38, 1, "python_function");
      for (int i = 0; i < 6; ++i) {
        const auto [name, bwd] = parts[i];
        const double at = h + 1 + 6.0 * i;
        k.range(name, at, 4, 1, "user_annotation");
        const bool gemm = std::string_view(name).starts_with("mlp");
        const int step = i / 2;  // 0: first a2a, 1: gemm, 2: second a2a
        const int stream = gemm ? (bwd ? 8 : 7) : (bwd ? 14 : 13);
        k.kernel(gemm ? "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n" : kA2a, stream, o + 10.0 * step, 10, at + 1);
      }
    }
  }
  const auto t = import_and_load({k.write("overlapped.json")}, temp_path("overlapped.db"));
  ASSERT_TRUE(t.recognition.moe);
  EXPECT_GT(t.recognition.layers_by_nesting, 0);
  EXPECT_TRUE(t.recognition.ambiguities.empty()) << t.recognition.ambiguities.front();
  for (int pair = 0; pair < 4; ++pair) {
    const double o = 100 + 40.0 * pair;
    // The op of the kernel that started at `us` on stream `stream`.
    auto op_at = [&](int stream, double us) -> const analyzer::OpRange* {
      for (const auto& a : t.activities)
        if (a.start_ns == static_cast<std::int64_t>(us * 1000) && a.op >= 0 &&
            t.streams.at(static_cast<std::size_t>(a.stream)).native_id == stream)
          return &t.ops[static_cast<std::size_t>(a.op)];
      return nullptr;
    };
    const auto* fd = op_at(13, o);  // forward dispatch
    const auto* bg = op_at(8, o + 10);  // backward expert GEMM
    ASSERT_TRUE(fd && bg) << pair;
    EXPECT_EQ(fd->kind, OpKind::kDispatchAllToAll) << pair;
    EXPECT_EQ(fd->phase, Phase::kForward) << pair;
    EXPECT_EQ(fd->layer, pair % 2) << pair;
    EXPECT_EQ(fd->micro_batch, pair / 2) << pair;
    EXPECT_EQ(bg->kind, OpKind::kExpertFfn) << pair;
    EXPECT_EQ(bg->phase, Phase::kBackward) << pair;
    EXPECT_EQ(bg->layer, 1 - pair % 2) << pair;
    EXPECT_EQ(bg->micro_batch, pair / 2) << pair;
  }
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.layers.size(), 2u);
  ASSERT_EQ(b.iterations.size(), 1u);
  EXPECT_EQ(b.iterations[0].t.window_ns, 150'000);
  for (const auto& l : b.layers) {
    EXPECT_EQ(l.mean_window_ns, 120'000) << l.layer;
    EXPECT_LE(l.mean_window_ns, b.iterations[0].t.window_ns) << l.layer;
    EXPECT_EQ(l.forward.window_ns, 60'000) << l.layer;
    EXPECT_EQ(l.backward.window_ns, 60'000) << l.layer;
    EXPECT_EQ(l.total.overlap_ns, l.total.busy_ns) << l.layer;
    EXPECT_DOUBLE_EQ(l.total.overlap_share(), 1.0) << l.layer;
  }
}

// Iterations whose GPU work lags their CPU steps (HTA's negative queue
// length): step 1 launched [10,90] us on the host runs on the GPU at
// gemm s7 [500,800] and a2a s13 [700,900]; step 2 runs gemm s7 [800,1100]
// and a2a s13 [850,950]. Their work overlaps ([800,900]), their windows do
// not: by hand, iteration 1 is [500,800) and 2 is [800,1100], which add up
// to the 600 us span. Iteration 1 counts its own work inside its window:
// compute 300 us, all-to-all [700,800] 100 us; the rest of its all-to-all
// runs in iteration 2's window, which its own gemm fills (busy 300, idle 0).
TEST(MoeRecognition, IterationWindowsPartitionTheRanksTimeUnderGpuLag) {
  Kineto k;
  k.range("ProfilerStep#1", 0, 100);
  k.range("ProfilerStep#2", 100, 100);
  k.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 7, 500, 300, 10);
  k.kernel(kA2a, 13, 700, 200, 20);
  k.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 7, 800, 300, 110);
  k.kernel(kA2a, 13, 850, 100, 120);
  const auto t = import_and_load({k.write("lag.json")}, temp_path("lag.db"));
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.iterations.size(), 2u);
  const auto& i1 = b.iterations[0].t;
  const auto& i2 = b.iterations[1].t;
  EXPECT_EQ(i1.window_ns, 300'000);
  EXPECT_EQ(i2.window_ns, 300'000);
  EXPECT_EQ(b.iteration_total.window_ns, 600'000);  // the span, not 700 us (400 + 300)
  EXPECT_EQ(i1.at(Category::kOtherCompute), 300'000);
  EXPECT_EQ(i1.at(Category::kAllToAll), 100'000);
  EXPECT_EQ(i2.at(Category::kAllToAll), 100'000);
  EXPECT_EQ(i2.busy_ns, 300'000);
  EXPECT_EQ(i2.idle_ns, 0);
  for (const auto* it : {&i1, &i2}) {
    EXPECT_EQ(it->busy_ns + it->outside_ns() + it->idle_ns, it->window_ns);
    for (int c = 0; c < kNumCategories; ++c) EXPECT_LE(it->share(static_cast<Category>(c)), 1.0);
  }
}

// A pipeline-parallel + expert-parallel job: NCCL runs both the MoE
// all-to-all and the pipeline stages' send/recv in ncclDevKernel_SendRecv.
// The profiler records which collective each launch was ("Collective name":
// all_to_allv inside the MoE layer, send and recv between the stages). By
// hand: one MoE layer (module MoELayer_1) with its dispatch [100,120] and
// combine [160,180]; the stage's recv [10,40] and send [300,330] are other
// communication: all-to-all 40 us, other communication 60 us, no all-to-all
// taken for an MoE one outside the layer, a single layer instance.
TEST(MoeRecognition, PipelineSendRecvIsNotAllToAll) {
  constexpr const char* kSendRecv = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)";
  auto named = [](const char* collective, int peers) {
    nlohmann::json a = {{"Collective name", collective}, {"In msg nelems", 4096}, {"Out msg nelems", 4096},
                        {"Group size", peers}, {"dtype", "BFloat16"}};
    return a;
  };
  Kineto k;
  k.range("ProfilerStep#3", 0, 1000);
  k.range("nn.Module: MoELayer_1", 50, 40, 1, "python_function");
  k.kernel(kSendRecv, 20, 10, 30, 5, 1, named("recv", 2));
  k.kernel(kSendRecv, 13, 100, 20, 51, 1, named("all_to_allv", 8));
  k.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 7, 120, 40, 60);
  k.kernel(kSendRecv, 13, 160, 20, 70, 1, named("all_to_allv", 8));
  k.kernel(kSendRecv, 21, 300, 30, 95, 1, named("send", 2));
  const auto t = import_and_load({k.write("pp_ep.json")}, temp_path("pp_ep.db"));
  ASSERT_TRUE(t.recognition.moe);
  EXPECT_EQ(t.recognition.a2a_assumed_moe, 0);
  EXPECT_TRUE(t.recognition.rules_used.count("megatron-core: MoE layer module"));
  EXPECT_EQ(op_of_kernel(t, kSendRecv, 10).kind, OpKind::kOtherComm);
  EXPECT_EQ(op_of_kernel(t, kSendRecv, 300).kind, OpKind::kOtherComm);
  EXPECT_EQ(op_of_kernel(t, kSendRecv, 100).kind, OpKind::kDispatchAllToAll);
  EXPECT_EQ(op_of_kernel(t, kSendRecv, 160).kind, OpKind::kCombineAllToAll);
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.layers.size(), 1u);
  ASSERT_EQ(b.iterations.size(), 1u);
  EXPECT_EQ(b.iterations[0].t.at(Category::kAllToAll), 40'000);
  EXPECT_EQ(b.iterations[0].t.at(Category::kOtherComm), 60'000);
  // Without the collective names the communicator tells them apart: the
  // send/recv ran on other NCCL streams (PyTorch gives each process group its
  // own) than the all-to-alls inside the MoE layer. The same numbers.
  for (const int p2p_stream : {20, 13}) {
    SCOPED_TRACE(p2p_stream);
    Kineto bare;
    bare.range("ProfilerStep#3", 0, 1000);
    bare.range("nn.Module: MoELayer_1", 50, 40, 1, "python_function");
    bare.kernel(kSendRecv, p2p_stream, 10, 30, 5);
    bare.kernel(kSendRecv, 13, 100, 20, 51);
    bare.kernel("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n", 7, 120, 40, 60);
    bare.kernel(kSendRecv, 13, 160, 20, 70);
    bare.kernel(kSendRecv, p2p_stream + 1, 300, 30, 95);
    const auto u = import_and_load({bare.write("pp_ep_bare.json")}, temp_path("pp_ep_bare.db"));
    const auto bu = analyzer::compute_breakdown(u);
    ASSERT_EQ(bu.iterations.size(), 1u);
    if (p2p_stream == 20) {
      EXPECT_EQ(u.recognition.a2a_assumed_moe, 0);
      EXPECT_EQ(u.recognition.rules_used.count(
                    "communicator: another NCCL stream than the MoE all-to-alls' (send/recv, not an MoE all-to-all)"),
                1u);
      EXPECT_EQ(bu.iterations[0].t.at(Category::kAllToAll), 40'000);
      EXPECT_EQ(bu.iterations[0].t.at(Category::kOtherComm), 60'000);
    } else {
      // One on the all-to-alls' own stream: nothing tells it from one, so it
      // is taken for the MoE layer's (and said so).
      EXPECT_EQ(u.recognition.a2a_assumed_moe, 1);
      EXPECT_EQ(bu.iterations[0].t.at(Category::kAllToAll), 70'000);
    }
  }
}

// A pipeline-parallel + expert-parallel job of four ranks as Megatron-Core
// runs it: PP = 2 stages, EP = 2 within each stage. The MoE all-to-alls are
// all_to_all_single calls on the expert group's stream ("all_to_allv"); the
// stages exchange activations through batch_isend_irecv, which the profiler
// records as one "coalesced" collective of the pipeline group
// (Megatron-Core's group_desc "PIPELINE_MODEL_PARALLEL_GROUP"; a second
// variant records only its two ranks, a third nothing at all).
// Each rank, by hand (us): stage 0 runs its MoE layer (dispatch [100,130],
// expert GEMM [130,190], combine [190,220]) and sends [300,350]; stage 1
// receives [300,350], then runs its layer shifted by 300 us (dispatch
// [400,430], GEMM [430,490], combine [490,520]). The iteration window is
// [100,350] on stage 0 and [300,520] on stage 1: all-to-all 60 us of 250
// (0.24) and 60 of 220 (0.2727); the send/recv 50 us is other communication.
// The expected shares are computed by an interval union over the kernels the
// fixture itself names all_to_allv, independent of recognition.
TEST(MoeRecognition, PipelinePlusExpertParallelRanks) {
  constexpr const char* kSendRecv = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)";
  constexpr const char* kGemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64";
  enum class Record { kPipelineGroup, kTwoRanks, kNothing };
  for (const auto record : {Record::kPipelineGroup, Record::kTwoRanks, Record::kNothing}) {
    SCOPED_TRACE(static_cast<int>(record));
    std::vector<std::string> files;
    std::map<int, double> expected_share;
    for (int rank = 0; rank < 4; ++rank) {
      const int stage = rank / 2;
      const int peer = stage == 0 ? rank + 2 : rank - 2;
      const double shift = stage * 300;
      auto a2a = [&](double elems) {
        return nlohmann::json{{"Collective name", "all_to_allv"},
                              {"In msg nelems", elems},
                              {"Out msg nelems", elems},
                              {"Group size", 2},
                              {"dtype", "BFloat16"},
                              {"Process Group Name", "5"},
                              {"Process Group Description", "EXPERT_MODEL_PARALLEL_GROUP"},
                              {"Process Group Ranks", stage == 0 ? "[0, 1]" : "[2, 3]"}};
      };
      nlohmann::json p2p = nlohmann::json::object();
      if (record == Record::kPipelineGroup)
        p2p = {{"Collective name", "coalesced"}, {"Process Group Name", "3"},
               {"Process Group Description", "PIPELINE_MODEL_PARALLEL_GROUP"}};
      else if (record == Record::kTwoRanks)
        p2p = {{"Collective name", "coalesced"},
               {"Process Group Ranks", fmt::format("[{}, {}]", std::min(rank, peer), std::max(rank, peer))}};
      Kineto k;
      k.range("ProfilerStep#4", 0, 600);
      k.range("nn.Module: TransformerLayer_3", 40 + shift, 50, 1, "python_function");
      k.range("nn.Module: MoELayer_3", 45 + shift, 40, 1, "python_function");
      k.kernel(kSendRecv, 17, 100 + shift, 30, 50 + shift, 1, a2a(8192));
      k.kernel(kGemm, 7, 130 + shift, 60, 60 + shift);
      k.kernel(kSendRecv, 17, 190 + shift, 30, 70 + shift, 1, a2a(8192));
      k.kernel(kSendRecv, 29, 300, 50, 200, 1, p2p);
      files.push_back(k.write(fmt::format("pp_ep_rank{}.json", rank), rank, 4));
      // The reference: all_to_allv kernels' union over the rank's busy window.
      const double first = stage == 0 ? 100 : 300, last = stage == 0 ? 350 : 520;
      expected_share[rank] = 60.0 / (last - first);
    }
    const auto t = import_and_load(files, temp_path("pp_ep_ranks.db"));
    ASSERT_TRUE(t.recognition.moe);
    EXPECT_EQ(t.recognition.a2a_assumed_moe, 0);
    EXPECT_TRUE(t.recognition.rules_used.count("megatron-core: MoE layer module"));
    const char* rule = record == Record::kPipelineGroup
                           ? "collective group: pipeline process group, send/recv not all-to-all"
                       : record == Record::kTwoRanks
                           ? "collective group: two ranks (one peer), send/recv not all-to-all"
                           : "communicator: another NCCL stream than the MoE all-to-alls' (send/recv, not an MoE all-to-all)";
    EXPECT_EQ(t.recognition.rules_used.count(rule), 1u) << rule;
    const auto b = analyzer::compute_breakdown(t);
    ASSERT_EQ(b.iterations.size(), 4u);  // one per rank
    EXPECT_EQ(b.layers.size(), 1u);
    for (const auto& row : b.iterations) {
      SCOPED_TRACE(row.rank);
      EXPECT_NEAR(row.t.share(Category::kAllToAll), expected_share[row.rank], 0.005);
      EXPECT_EQ(row.t.at(Category::kOtherComm), 50'000);
    }
  }
}

// A GEMM's FLOPs from the shapes its framework op recorded (record_shapes):
// torchtitan's experts module runs aten::mm(x[512,64], w[64,256]), whose
// first kernel gets 2 x 512 x 64 x 256 = 16,777,216 FLOPs and whose second
// (a split-K reduction) none; aten::linear(x[2,8,64], W[32,64]) in the
// router 2 x 16 x 64 x 32 = 65,536; a kernel outside any shaped op none.
TEST(MoeRecognition, GemmFlopsFromRecordedShapes) {
  Kineto k;
  k.range("ProfilerStep#1", 0, 1000);
  k.range("nn.Module: MoE_0", 5, 90, 1, "python_function");
  k.range("nn.Module: TokenChoiceTopKRouter_0", 6, 8, 1, "python_function");
  k.range("aten::linear", 7, 5, 1, "cpu_op", {{"Input Dims", {{2, 8, 64}, {32, 64}, nlohmann::json::array()}}});
  k.kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n", 7, 100, 10, 8);
  k.range("nn.Module: GroupedExperts_0", 20, 40, 1, "python_function");
  k.range("aten::mm", 21, 10, 1, "cpu_op", {{"Input Dims", {{512, 64}, {64, 256}}}, {"Input type", {"float", "float"}}});
  k.kernel("sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_splitk", 7, 120, 30, 22);
  k.kernel("splitKreduce_kernel", 7, 150, 5, 25);
  k.kernel("vectorized_elementwise_kernel", 7, 160, 5, 40);
  const auto t = import_and_load({k.write("titan_shapes.json")}, temp_path("titan_shapes.db"));
  ASSERT_TRUE(t.recognition.moe);
  EXPECT_TRUE(t.recognition.rules_used.count("torchtitan: grouped experts module"));
  EXPECT_DOUBLE_EQ(op_of_kernel(t, "sm90_xmma_gemm_f32f32_tf32f32_f32_nn_n_splitk", 120).flops, 16'777'216.0);
  EXPECT_DOUBLE_EQ(op_of_kernel(t, "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n", 100).flops, 65'536.0);
  EXPECT_LE(op_of_kernel(t, "splitKreduce_kernel", 150).flops, 0.0);
  EXPECT_LE(op_of_kernel(t, "vectorized_elementwise_kernel", 160).flops, 0.0);
}

// --- hand-built Nsight Systems export ---------------------------------------------


// A DeepEP job without any annotation: only kernel names. Two layers:
//   notify_dispatch [100,105], dispatch [105,125], grouped gemm [125,165],
//   combine [165,185]; then notify_dispatch [200,205], dispatch [205,215],
//   gemm [215,235], combine [235,245].
// By hand: DeepEP kernels are all-to-all; layer 0's window [100,185] = 85 us
// (all-to-all 5 + 20 + 20 = 45 us); layer 1 [200,245] = 45 us (all-to-all
// 25 us); a single iteration (no markers) numbered 0.
// A fork of the library under another namespace (as vendored copies and
// forks name it) gives the same numbers.
TEST(MoeRecognition, DeepEpKernelsWithoutAnnotationsInAnNsysExport) {
  for (const std::string ns : {"deep_ep", "acme_moe::ep"}) {
    SCOPED_TRACE(ns);
    const auto in = temp_path("deepep-" + ns.substr(0, 4) + ".sqlite"), out = temp_path("deepep-" + ns.substr(0, 4) + ".db");
    std::string kernels, runtime;
    struct K { int name; int start, end; };
    const K ks[] = {{1, 100, 105}, {2, 105, 125}, {3, 125, 165}, {4, 165, 185},
                    {1, 200, 205}, {2, 205, 215}, {3, 215, 235}, {4, 235, 245}};
    int corr = 1;
    for (const auto& k : ks) {
      kernels += fmt::format("{}({}, {}, 0, {}, {}, 704643072, {}, 1, 1, 1, 32, 1, 1)", kernels.empty() ? "" : ",",
                             k.start * 1000, k.end * 1000, k.name == 3 ? 7 : 13, corr, k.name);
      runtime += fmt::format("{}({}, {}, 0, 704643115, {}, 5, 0)", runtime.empty() ? "" : ",", k.start * 10,
                             k.start * 10 + 5, corr);
      ++corr;
    }
    make_export(in, std::string(kNsysExportTables) + R"(
      INSERT INTO StringIds VALUES
        (1, 'void )" + ns + R"(::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int, int, int const*, int*, int*, int, int, void**, int**, int)'),
        (2, 'void )" + ns + R"(::intranode::dispatch<8, 768, 8192>(int4*, float*, int*, long*, float*)'),
        (3, 'void cutlass::Kernel<cutlass_80_tensorop_bf16_s16816gemm_grouped_bf16_256x128_64x3_tn_align8>(Params)'),
        (4, 'void )" + ns + R"(::intranode::combine<__nv_bfloat16, 8, 768, 4096>(__nv_bfloat16*, float*, int*)'),
        (5, 'cudaLaunchKernel_v7000');
      INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES )" + kernels + R"(;
      INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES )" + runtime + ";");
    const auto t = import_and_load({in}, out);
    ASSERT_TRUE(t.recognition.moe);
    EXPECT_EQ(t.recognition.kernels_by_name, 8);  // DeepEP kernels and the grouped GEMM
    EXPECT_FALSE(t.recognition.iterations_marked);
    for (const auto& a : t.activities) {
      if (t.str(a.name).find("notify_dispatch") != std::string_view::npos) {
        EXPECT_EQ(t.ops.at(static_cast<std::size_t>(a.op)).kind, OpKind::kDispatchAllToAll);
      }
    }
    const auto b = analyzer::compute_breakdown(t);
    ASSERT_EQ(b.layers.size(), 2u);
    expect_times(b.layers[0].forward, 85'000, {{Category::kAllToAll, 45'000}, {Category::kExpertCompute, 40'000}});
    expect_times(b.layers[1].forward, 45'000, {{Category::kAllToAll, 25'000}});
    ASSERT_EQ(b.iterations.size(), 1u);
    EXPECT_EQ(b.iterations[0].iteration, 0);
  }
}

// A user's rules file: their own range names for dispatch and combine and a
// custom all-to-all kernel, tried before the presets.
TEST(MoeRecognition, UserRulesFile) {
  Kineto k;
  k.range("step 4", 0, 1000);
  k.range("my_moe[2]", 5, 50);
  k.range("send_tokens", 10, 5);
  k.kernel("my_a2a_kernel", 13, 100, 30, 11);
  k.kernel("index_select_kernel", 7, 90, 10, 12);
  k.range("recv_tokens", 20, 5);
  k.kernel("my_a2a_kernel", 13, 200, 30, 21);
  const auto rules = temp_path("rules.json");
  write_file(rules, R"({"version": 1, "name": "ours",
    "ranges": [
      {"label": "step", "name": "^step ([0-9]+)$", "role": "iteration", "iteration": "$1", "scope": "process"},
      {"label": "layer", "name": "^my_moe\\[([0-9]+)\\]$", "role": "layer", "layer": "$1"},
      {"label": "dispatch", "name": "^send_tokens$", "role": "op", "kind": "dispatch"},
      {"label": "combine", "name": "^recv_tokens$", "role": "op", "kind": "combine"}],
    "kernels": [{"all_of": ["my_a2a"], "category": "all_to_all", "label": "our all-to-all"}]})");
  const auto t = import_and_load({k.write("user.json")}, temp_path("user.db"), rules);
  const auto& d = op_of_kernel(t, "my_a2a_kernel", 100);
  EXPECT_EQ(d.kind, OpKind::kDispatchAllToAll);
  EXPECT_EQ(d.layer, 2);
  EXPECT_EQ(d.iteration, 4);
  EXPECT_EQ(op_of_kernel(t, "my_a2a_kernel", 200).kind, OpKind::kCombineAllToAll);
  // Compute inside the dispatch range is its permutation.
  EXPECT_EQ(op_of_kernel(t, "index_select_kernel", 90).kind, OpKind::kPermute);
  EXPECT_EQ(t.recognition.rules_used.count("ours: dispatch"), 1u);
  // Without the file nothing is recognised: no MoE op ranges.
  const auto plain = analyzer::load_trace(temp_path("user.db"));
  EXPECT_FALSE(plain.recognition.moe);
  EXPECT_TRUE(plain.ops.empty());
}

// Malformed annotations are counted and named, not guessed at.
TEST(MoeRecognition, MalformedAnnotationsAreCounted) {
  Kineto k;
  k.range("moetrace:dispatch layer=x", 10, 5);
  k.kernel(kA2a, 13, 100, 10, 11);
  const auto t = import_and_load({k.write("bad.json")}, temp_path("bad.db"));
  EXPECT_EQ(t.recognition.annotations_malformed, 1);
  EXPECT_NE(t.recognition.first_malformed.find("layer=\"x\""), std::string::npos) << t.recognition.first_malformed;
  EXPECT_TRUE(t.ops.empty());
}

// Traces in ../shared/data: ProfilerStep#N gives iterations on the HTA ranks.
// A training loop profiled without prof.step(): no ProfilerStep ranges, but
// every torch.optim optimizer's step leaves "Optimizer.step#<Class>.step"
// (torch/optim/optimizer.py). Two steps of one MoE layer (DeepSpeed's module
// names), the optimizer a subclass of another name (apex's FusedAdam), and
// the forward of a third step after the last optimizer step:
//   step 0: forward gate [100,110] expert [110,150]; backward expert grouped
//           GEMM [200,260] (autograd thread); optimizer kernel [300,310]
//           inside the step
//   step 1: the same shifted by 1000 us
//   step 2: forward expert [2110,2150], never stepped
// By hand: iterations 0, 1, 2; one layer (layer 0) in each, forward and
// backward; the optimizer's kernel belongs to the iteration its step ends.
// Counting instances over the whole trace instead would give three layers.
const char* kGroupedGemm =
    "void cutlass::Kernel2<cutlass_80_tensorop_bf16_s16816gemm_grouped_bf16_128x128_64x3_tn_align8>(Params)";

TEST(MoeRecognition, OptimizerStepsEndIterationsWithoutProfilerSteps) {
  Kineto k;
  for (int step = 0; step < 3; ++step) {
    const double o = 1000.0 * step;
    k.range("nn.Module: MOELayer_0", o + 10, 30, 1, "python_function");
    if (step < 2) {
      k.range("nn.Module: TopKGate_0", o + 11, 3, 1, "python_function");
      k.kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 7, o + 100, 10, o + 12);
    }
    k.range("nn.Module: Experts_0", o + 20, 10, 1, "python_function");
    k.kernel("sm90_xmma_gemm_bf16bf16_bf16f32", 7, o + 110, 40, o + 21);
    if (step == 2) break;
    // The experts' backward: a CUTLASS grouped GEMM, known by its name.
    k.range("autograd::engine::evaluate_function: GroupedMmBackward0", o + 60, 10, 2, "cpu_op");
    k.kernel(kGroupedGemm, 7, o + 200, 60, o + 61, 2);
    k.range("Optimizer.step#FusedAdam.step", o + 80, 20, 1, "user_annotation");
    k.kernel("multi_tensor_apply_kernel", 7, o + 300, 10, o + 85);
  }
  const auto t = import_and_load({k.write("optimizer_steps.json")}, temp_path("optimizer_steps.db"));
  ASSERT_TRUE(t.recognition.moe);
  EXPECT_TRUE(t.recognition.iterations_marked);
  EXPECT_TRUE(t.recognition.iterations_from_steps);
  EXPECT_EQ(t.recognition.rules_used.at("pytorch: optimizer step (ends an iteration)"), 2);
  EXPECT_EQ(op_of_kernel(t, "sm90_xmma_gemm_bf16bf16_bf16f32", 110).iteration, 0);
  EXPECT_EQ(op_of_kernel(t, "multi_tensor_apply_kernel", 300).iteration, 0);
  EXPECT_EQ(op_of_kernel(t, "sm90_xmma_gemm_bf16bf16_bf16f32", 1110).iteration, 1);
  EXPECT_EQ(op_of_kernel(t, kGroupedGemm, 1200).iteration, 1);
  EXPECT_EQ(op_of_kernel(t, "sm90_xmma_gemm_bf16bf16_bf16f32", 2110).iteration, 2);
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.layers.size(), 1u);
  EXPECT_EQ(b.layers[0].layer, 0);
  std::set<std::pair<std::int32_t, Phase>> rows;
  for (const auto& r : b.rows) rows.insert({r.iteration, r.phase});
  EXPECT_EQ(rows, (std::set<std::pair<std::int32_t, Phase>>{{0, Phase::kForward}, {0, Phase::kBackward},
                                                             {1, Phase::kForward}, {1, Phase::kBackward},
                                                             {2, Phase::kForward}}));
}

// PyTorch's backward runs on the autograd thread, outside the forward's
// module ranges; the profiler gives each forward op and the backward node
// of its gradient the same "Sequence number" (the node's "Fwd thread id"
// names the forward thread, a forward op's is 0). Here Mixtral's module
// names (HF transformers: MixtralSparseMoeBlock, its router a plain
// nn.Linear named gate, the experts MixtralBlockSparseTop2MLP), one layer:
//   forward  (tid 1): block [10,50]: router mm seq 7 [11,2] -> kernel [100,105];
//                     expert mm seq 8 [20,2] -> kernel [105,135]
//   backward (tid 2): MmBackward0 seq 8 [60,5] -> kernel [200,260];
//                     MmBackward0 seq 7 [70,5] -> kernel [260,265];
//                     a node with no forward in a module, seq 3 [80,5] -> kernel [265,270]
// By hand: the backward kernel of seq 8 is the layer's expert work, that of
// seq 7 its gate, both layer 0 backward; the last stays outside the layer.
TEST(MoeRecognition, BackwardNodesJoinTheirForwardModuleBySequenceNumber) {
  Kineto k;
  k.range("ProfilerStep#0", 0, 1000);
  k.range("nn.Module: MixtralSparseMoeBlock_0", 10, 40, 1, "python_function");
  k.range("nn.Module: Linear_0", 11, 4, 1, "python_function");
  k.range("aten::mm", 11, 2, 1, "cpu_op", {{"Sequence number", 7}, {"Fwd thread id", 0}});
  k.kernel("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_TNN", 7, 100, 5, 12);
  k.range("nn.Module: MixtralBlockSparseTop2MLP_0", 20, 10, 1, "python_function");
  k.range("aten::mm", 20, 2, 1, "cpu_op", {{"Sequence number", 8}, {"Fwd thread id", 0}});
  k.kernel("nvjet_sm90_tst_256x128_64x4_2x1_v_bz_NNT", 7, 105, 30, 21);
  k.range("aten::add", 90, 2, 1, "cpu_op", {{"Sequence number", 3}, {"Fwd thread id", 0}});
  for (auto [seq, ts, gpu, dur] : {std::tuple{8, 60.0, 200.0, 60.0}, {7, 70.0, 260.0, 5.0}, {3, 80.0, 265.0, 5.0}}) {
    k.range("autograd::engine::evaluate_function: MmBackward0", ts, 5, 2, "cpu_op",
            {{"Sequence number", seq}, {"Fwd thread id", 1}});
    k.range("MmBackward0", ts + 1, 3, 2, "cpu_op", {{"Sequence number", seq}, {"Fwd thread id", 1}});
    k.kernel("nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", 7, gpu, dur, ts + 2, 2);
  }
  const auto rules = temp_path("mixtral_rules.json");
  // The block and its experts are the built-in hf-transformers preset's; the
  // router, an nn.Linear (Linear_0 here), only a user's rule can name.
  write_file(rules, R"({"version": 1, "ranges": [
      {"label": "router inside the block", "name": "^nn\\.Module: Linear_0$", "role": "op", "kind": "gate"}]})");
  const auto t = import_and_load({k.write("mixtral_seq.json")}, temp_path("mixtral_seq.db"), rules);
  ASSERT_TRUE(t.recognition.moe);
  EXPECT_EQ(t.recognition.rules_used.at("hf-transformers: sparse MoE block"), 1);
  EXPECT_EQ(t.recognition.rules_used.at("hf-transformers: experts"), 1);
  EXPECT_EQ(t.recognition.backward_by_sequence, 2);
  const auto& expert_bwd = op_of_kernel(t, "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", 200);
  EXPECT_EQ(expert_bwd.kind, OpKind::kExpertFfn);
  EXPECT_EQ(expert_bwd.phase, Phase::kBackward);
  EXPECT_EQ(expert_bwd.layer, 0);
  const auto& gate_bwd = op_of_kernel(t, "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", 260);
  EXPECT_EQ(gate_bwd.kind, OpKind::kGate);
  EXPECT_EQ(gate_bwd.layer, 0);
  EXPECT_LT(op_of_kernel(t, "nvjet_sm90_tst_128x256_64x4_2x1_v_bz_coopA_NTN", 265).layer, 0);
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.layers.size(), 1u);
  EXPECT_EQ(b.layers[0].backward.at(Category::kExpertCompute), 60'000);
  EXPECT_EQ(b.layers[0].backward.at(Category::kGating), 5'000);
}

// A real trace: the PyTorch profiler on an H200 (tests/data/gpu/README.md),
// three fwd + bwd + SGD steps of one MoE layer (DeepSpeed-style module
// names), without prof.step(). One layer in three iterations, each with its
// forward and its backward: the backward's kernels are plain cuBLAS GEMMs
// under autograd nodes, tied to the layer by the sequence number they share
// with their forward ops. The optimizer's kernels, launched inside the step
// function that also holds the layer's module ranges, are not the layer's.
TEST(MoeRecognition, RecordedPyTorchMoeLayerThreeStepsWithoutProfilerStep) {
  const auto in = MOETRACE_SOURCE_DIR + "/tests/data/gpu/torch_moe_peer.json.gz";
  ASSERT_TRUE(std::filesystem::exists(in)) << in;
  const auto t = import_and_load({in}, temp_path("torch_moe_peer.db"));
  ASSERT_TRUE(t.recognition.moe);
  EXPECT_TRUE(t.recognition.iterations_from_steps);
  EXPECT_EQ(t.recognition.layers_by_nesting, 0);  // the module ranges are the layer
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.layers.size(), 1u);
  EXPECT_EQ(b.layers[0].layer, 0);
  EXPECT_EQ(b.iterations.size(), 3u);
  std::set<std::pair<std::int32_t, Phase>> rows;
  for (const auto& r : b.rows) rows.insert({r.iteration, r.phase});
  EXPECT_EQ(rows, (std::set<std::pair<std::int32_t, Phase>>{{0, Phase::kForward},
                                                             {0, Phase::kBackward},
                                                             {1, Phase::kForward},
                                                             {1, Phase::kBackward},
                                                             {2, Phase::kForward},
                                                             {2, Phase::kBackward}}));
  EXPECT_GT(t.recognition.backward_by_sequence, 0);
  // The expert GEMMs of the backward are the layer's: the expert category
  // holds most of the layer (16 GEMMs of 4096 x 4096 x 14336 an iteration).
  EXPECT_GT(b.layers[0].backward.at(Category::kExpertCompute), b.layers[0].forward.at(Category::kExpertCompute));
  // No optimizer kernel (multi_tensor_apply) in an MoE layer.
  for (const auto& a : t.activities) {
    if (t.str(a.name).find("multi_tensor_apply") == std::string_view::npos || a.op < 0) continue;
    EXPECT_LT(t.ops.at(static_cast<std::size_t>(a.op)).layer, 0) << t.str(a.name);
  }
  // The layer's time in each iteration lies inside that iteration (the
  // slowest iteration's layer may outlast a faster iteration).
  ASSERT_EQ(b.layer_windows.size(), b.iterations.size());
  for (const auto& w : b.layer_windows) {
    const auto it = std::find_if(b.iterations.begin(), b.iterations.end(), [&](const auto& i) {
      return i.iteration == w.iteration && i.rank == w.rank;
    });
    ASSERT_NE(it, b.iterations.end()) << w.iteration;
    EXPECT_GT(w.ns, 0) << w.iteration;
    EXPECT_LE(w.ns, it->t.window_ns) << w.iteration;
  }
}

TEST(MoeRecognition, SharedKinetoTraceIterations) {
  const auto in = shared_data("kineto/hta-sampled_rank-0.json.gz");
  MOETRACE_NEED_SHARED(in);
  const auto t = import_and_load({in}, temp_path("hta0.db"));
  // zcat | grep: ProfilerStep#551 and ProfilerStep#552 (user_annotation, tid 4037).
  EXPECT_TRUE(t.recognition.iterations_marked);
  EXPECT_FALSE(t.recognition.moe);  // a recommendation model: no MoE layer
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.iterations.size(), 2u);
  EXPECT_EQ(b.iterations[0].iteration, 551);
  EXPECT_EQ(b.iterations[1].iteration, 552);
  EXPECT_TRUE(b.layers.empty());
}

}  // namespace
}  // namespace moetrace::testing
