// MoE recognition on real traces recorded by others (../shared/data, see its
// README): vLLM on an MI300-class GPU under HIP-graph replay, and PyTorch MoE
// micro-benchmarks on a B300. Every expected number is counted by hand from
// the JSON (zcat FILE | python3: events by category, name and correlation
// id), as each comment says; none comes from moetrace's output.
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <string>

#include "import_test_util.h"
#include "kineto_fixture.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/launch_queue.h"
#include "moetrace/analyzer/model_spec.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/recorded_shapes.h"
#include "moetrace/analyzer/whatif.h"
#include "moetrace/sim/cost_model.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::testing {
namespace {

std::map<OpKind, int> moe_ops_by_kind(const analyzer::Trace& t) {
  std::map<OpKind, int> n;
  for (const auto& op : t.ops)
    if (op_kind_info(op.kind).moe_layer) ++n[op.kind];
  return n;
}

int total(const std::map<OpKind, int>& n) {
  int s = 0;
  for (const auto& [k, v] : n) s += v;
  return s;
}

// A test of one of the shared Kineto traces, kineto/<Param::file>, imported
// and loaded as `t` before the test runs, and recognised as MoE; skipped
// (or failed, shared_data.h) where the file is absent.
template <class Param>
class RecognisedSharedTrace : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    const std::string file = this->GetParam().file;
    const auto in = shared_data("kineto/" + file);
    MOETRACE_NEED_SHARED(in);
    t = import_and_load({in}, temp_path(file + ".db"));
    ASSERT_TRUE(t.recognition.moe);
  }

  analyzer::Trace t;
};

// AMD-AGI/TraceLens evals/generate_moe_traces.py: SimpleMoE.forward wraps
// each forward in record_function("MoE[...]") and its expert FFN (two bmm
// and a silu) in record_function("expert_ffn[...]"); the profiler records 3
// forward passes (active_iters=3), no_grad, no ProfilerStep. By hand from
// each file: 3 MoE ranges, 3 expert_ffn ranges; the kernels launched inside
// the MoE ranges (launch call inside the range on its thread): 36, 36, 30,
// 36, 42, 36; inside expert_ffn: 9; torch.topk's gatherTopK: 3. The
// layer's sizes are those the script wrote into each MoE range's name
// ("MoE[experts=64, tokens=16, topk=2, hidden=512, intermediate=1024]").
struct MicroBenchmark {
  const char* file;
  int moe_kernels;
  int experts, tokens, top_k;
  std::int64_t hidden, intermediate;
};

class TraceLensB300 : public RecognisedSharedTrace<MicroBenchmark> {};

TEST_P(TraceLensB300, OneForwardOnlyMoELayerThreeTimes) {
  const auto& m = GetParam();
  EXPECT_FALSE(t.recognition.phases_marked);  // no autograd backward node: forward only
  const auto n = moe_ops_by_kind(t);
  EXPECT_EQ(total(n), m.moe_kernels);
  EXPECT_EQ(n.count(OpKind::kExpertFfn) ? n.at(OpKind::kExpertFfn) : 0, 9);
  EXPECT_EQ(n.count(OpKind::kGate) ? n.at(OpKind::kGate) : 0, 3);
  for (const auto& op : t.ops) EXPECT_EQ(op.phase, Phase::kForward);
  // The three passes are three iterations of one layer (the MoE range's name
  // recurs), not three layers.
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.layers.size(), 1u);
  EXPECT_EQ(b.layers[0].iterations, 3);
  EXPECT_EQ(b.iterations.size(), 3u);
  EXPECT_EQ(b.layers[0].backward.window_ns, 0);
}

// The layer's sizes from what the profiler recorded (record_shapes): no
// range or kernel of the router GEMM is placed in the gate here (a plain
// nn.Linear before torch.topk), so E and the tokens come from the [T, E]
// scores the top-k picks from, M and H from the two bmm of the experts, k
// from the rows of the down projection (the token-expert pairs gathered)
// over the tokens. Each must be what the range's name says.
TEST_P(TraceLensB300, TheLayerSizesAreTheOnesItsRangeNames) {
  const auto& m = GetParam();
  const auto s = analyzer::recorded_layer_shape(t, 0);
  EXPECT_EQ(s.experts, m.experts);
  EXPECT_EQ(s.tokens, m.tokens);
  EXPECT_EQ(s.top_k, m.top_k);
  EXPECT_EQ(s.model_dim, m.hidden);
  EXPECT_EQ(s.hidden, m.intermediate);
  EXPECT_EQ(s.elem_bytes, 2);  // c10::BFloat16
  EXPECT_NE(s.source.find("aten::topk"), std::string::npos) << s.source;
}

// How the advice reads these traces. By hand from each file: every
// forward pass of the experts is two aten::bmm, each one cuBLAS kernel
// (nvjet_*) over all the token-expert pairs, and one elementwise kernel
// between them, where a loop over the experts would launch two GEMMs for
// each expert with rows: the experts run fused, one GEMM startup per
// projection. No pass is a backward: the replay of the trace's own
// configuration compares the forward pass alone (the simulated layer's
// forward window, not forward + backward), and a note says the advice is
// about training. What the models miss is the layer's other ops: each pass
// gathers every token-expert pair's weights (at::native's
// vectorized_gather_kernel, by hand per pass 26-2163 us, more than the
// pass's nvjet GEMMs, 19-1211 us), which no model op charges: the replay is
// unreliable and names the other ops.
TEST_P(TraceLensB300, FusedExpertsAndAForwardOnlyReplay) {
  analyzer::RecommendOptions o;
  o.cost_model = sim::cost_model_preset("h100-nvlink-ib");
  const auto rec = analyzer::recommend(t, o);
  ASSERT_EQ(rec.layers.size(), 1u);
  const auto& L = rec.layers[0];
  EXPECT_TRUE(L.workload.fused_experts);
  EXPECT_TRUE(std::any_of(rec.notes.begin(), rec.notes.end(), [](const std::string& n) {
    return n.find("the experts run fused") != std::string::npos && n.find("at most 3 kernels") != std::string::npos;
  }));
  ASSERT_TRUE(L.replay.computed);
  EXPECT_TRUE(L.replay.forward_only);
  EXPECT_EQ(L.replay.basis, "simulation");
  analyzer::WhatIf own;
  own.window = analyzer::LayerWindow::kMoeLayer;
  own.fused_experts = true;
  const auto sim = analyzer::simulate_layer(L.workload, sim::cost_model_preset("h100-nvlink-ib"), own);
  ASSERT_TRUE(sim.ok) << sim.error;
  EXPECT_GT(sim.backward_s, 0);
  EXPECT_DOUBLE_EQ(L.replay.simulated_s, sim.forward_s);
  EXPECT_TRUE(L.replay.unreliable);
  EXPECT_EQ(L.replay.off_term, "other ops");
  EXPECT_TRUE(std::any_of(rec.notes.begin(), rec.notes.end(), [](const std::string& n) {
    return n.find("records no backward pass of its MoE layers") != std::string::npos &&
           n.find("the advice is about a training step") != std::string::npos;
  }));
}

// Nothing measures the hardware here (one GEMM size, no all-to-all): the
// models run on the h100-nvlink-ib preset scaled to the B300 the trace
// names ("NVIDIA B300 SXM6 AC") by the two datasheets. By hand: the
// preset's GEMMs at 600 TFLOP/s x 2250 / 989.5 (dense BF16), its NVLink
// all-to-all at 2 ranks 0.5 / 350 GB/s x 450 / 900 per byte; the startups
// as the preset's (5 us a GEMM, 8 us an all-to-all).
TEST_P(TraceLensB300, ThePresetIsScaledToTheGpuOfTheTrace) {
  const auto rec = analyzer::recommend(t);
  EXPECT_EQ(rec.hardware.source, "preset");
  EXPECT_NE(rec.hardware.description.find("scaled to the trace's B300 by the datasheets (dense BF16 2250 / 989.5 "
                                          "TFLOP/s, HBM 8000 / 3350 GB/s, NVLink 5 900 / 450 GB/s)"),
            std::string::npos)
      << rec.hardware.description;
  const auto& terms = rec.hardware.terms;
  EXPECT_NEAR(terms.at("expert_seconds_per_flop").get<double>(), 1.0 / (600e12 * 2250 / 989.5), 1e-22);
  EXPECT_NEAR(terms.at("expert_gemm_seconds_per_byte").get<double>(), 1.0 / (2.6e12 * 8000 / 3350), 1e-26);
  EXPECT_DOUBLE_EQ(terms.at("expert_alpha_per_gemm_s").get<double>(), 5e-6);
  EXPECT_NEAR(terms.at("all_to_all").at("beta_s_per_byte").get<double>(), 0.5 / 350e9 * 450 / 900, 1e-20);
  EXPECT_DOUBLE_EQ(terms.at("all_to_all").at("alpha_s").get<double>(), 8e-6);
}

const MicroBenchmark kMicroBenchmarks[] = {
    {"tracelens-b300-moe_01_many_experts_few_tokens.json.gz", 36, 64, 16, 2, 512, 1024},
    {"tracelens-b300-moe_02_few_experts_many_tokens.json.gz", 36, 8, 256, 2, 512, 1024},
    {"tracelens-b300-moe_03_top1_sparse.json.gz", 30, 16, 128, 1, 512, 1024},
    {"tracelens-b300-moe_04_top2_dense.json.gz", 36, 16, 128, 2, 512, 1024},
    {"tracelens-b300-moe_05_large_capacity.json.gz", 42, 8, 512, 2, 1024, 2048},
    {"tracelens-b300-moe_06_tiny_batch_many_experts.json.gz", 36, 128, 4, 8, 512, 1024},
};

INSTANTIATE_TEST_SUITE_P(RealTraces, TraceLensB300, ::testing::ValuesIn(kMicroBenchmarks),
                         [](const ::testing::TestParamInfo<MicroBenchmark>& i) {
                           return std::string(i.param.file).substr(15, 6);
                         });

// vLLM on MI300 (gpt-oss-style model, 24 MoE layers), one engine step each
// (the user_annotation execute_..., vLLM's step range), its layers replayed
// from HIP graphs: no range inside a layer, the kernels' names alone place
// them. By hand from each file, sorted by GPU start: 24 _topk_forward, 24
// _sum_bitmatrix_rows, 48 _combined_routing_* (memset, compute), 48
// _matmul_ogs_* and 24 _finalize_matmul_scatter_bf16 kernels; the k-th
// finalize lies between the k-th and the (k+1)-th top-k. Layer k's window
// runs from its top-k's start to its finalize's end: decode, layer 0
// 331.597 us, the shortest 245.879 us, the longest 335.956 us; prefill +
// decode, layer 0 5172.970 us, shortest 5140.171 us, longest 5297.216 us.
// Launches (GPU events by the name of their correlated call): decode
// hipGraphLaunch 421, hipMemcpyAsync 9, hipLaunchKernel 3,
// hipExtModuleLaunchKernel 1; prefill + decode hipGraphLaunch 361,
// hipLaunchKernel 27, hipModuleLaunchKernel 24, hipMemcpyAsync 10,
// hipExtModuleLaunchKernel 1.
struct VllmTrace {
  const char* file;
  double layer0_us, shortest_us, longest_us;
  int launches, queued;  // launch statistics: every call but graph launches; queue: every event
};

class TraceLensVllm : public RecognisedSharedTrace<VllmTrace> {};

TEST_P(TraceLensVllm, TwentyFourMoELayersFromKernelNamesUnderGraphReplay) {
  const auto& v = GetParam();
  EXPECT_TRUE(t.recognition.rules_used.count("inference-engines: vLLM engine step (iteration)"));
  const auto n = moe_ops_by_kind(t);
  EXPECT_EQ(total(n), 168);
  EXPECT_EQ(n.at(OpKind::kGate), 24 + 24 + 48);
  EXPECT_EQ(n.at(OpKind::kExpertFfn), 48);
  EXPECT_EQ(n.at(OpKind::kUnpermute), 24);
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.iterations.size(), 1u);
  ASSERT_EQ(b.layers.size(), 24u);
  auto us = [](double x) { return static_cast<std::int64_t>(x * 1000 + 0.5); };
  std::int64_t shortest = INT64_MAX, longest = 0;
  for (const auto& l : b.layers) {
    shortest = std::min(shortest, l.mean_window_ns);
    longest = std::max(longest, l.mean_window_ns);
    EXPECT_EQ(l.backward.window_ns, 0);
  }
  // Kineto's microsecond timestamps become integer nanoseconds: 2 ns of rounding.
  EXPECT_NEAR(b.layers[0].mean_window_ns, us(v.layer0_us), 2);
  EXPECT_NEAR(shortest, us(v.shortest_us), 2);
  EXPECT_NEAR(longest, us(v.longest_us), 2);
  // HIP launches feed the launch statistics and the queue length.
  const auto q = analyzer::analyze_launch_queue(t);
  EXPECT_TRUE(q.hip);
  ASSERT_EQ(q.launches.size(), 1u);
  EXPECT_EQ(q.launches[0].launches, v.launches);
  std::int64_t points = 0;
  for (const auto& s : q.queues) points += s.count;
  EXPECT_EQ(points, 2 * v.queued);  // one point at each launch, one at each GPU start
}

const VllmTrace kVllmTraces[] = {
    {"tracelens-vllm-mi300-decode-full.json.gz", 331.597, 245.879, 335.956, 3 + 1 + 9, 434},
    {"tracelens-vllm-mi300-prefilldecode-piecewise.json.gz", 5172.970, 5140.171, 5297.216, 27 + 24 + 1 + 10, 423},
};

INSTANTIATE_TEST_SUITE_P(RealTraces, TraceLensVllm, ::testing::ValuesIn(kVllmTraces),
                         [](const ::testing::TestParamInfo<VllmTrace>& i) {
                           return std::string(i.param.file).find("decode-full") != std::string::npos ? "decode"
                                                                                                    : "prefill_decode";
                         });

// The decode trace with the model's sizes from a config.json in the
// original GPT-OSS release's spelling (no model_type; experts_per_token):
// 32 experts of M = H = 2880, top-4, gated (SwiGLU), 32 tokens a rank.
// Its devices carry no name; ROCm's properties (compute 9.4, 304 units,
// 191.98 GiB) are an MI300X's, so the preset is scaled to its datasheet. By
// hand: 32 x 4 = 128 rows reach all 32 experts, whose gated weights, 3 x
// 2880^2 x 2 B each, are 1.5925e9 B a forward pass; at the preset's 2.6
// TB/s x 5300 / 3350 = 4.1134 TB/s that is 0.3872 ms, against 6.4e9 FLOPs
// at 600 x 1307.4 / 989.5 TFLOP/s = 8 us: the layer is bound by its
// weights (FLOPs alone gave 0.040 ms against the 0.332 ms measured). The
// rest of the simulated layer (startups, router, permutes) is tens of us.
TEST(RealTracesVllm, DecodeExpertsBoundByTheirWeightsOnAnUnnamedMi300x) {
  const auto in = shared_data("kineto/tracelens-vllm-mi300-decode-full.json.gz");
  MOETRACE_NEED_SHARED(in);
  const auto t = import_and_load({in}, temp_path("vllm_decode_weights.db"));
  const auto model = analyzer::parse_model_spec(
      R"({"num_hidden_layers": 24, "num_experts": 32, "experts_per_token": 4, "hidden_size": 2880,
          "intermediate_size": 2880, "swiglu_limit": 7.0})",
      "gpt-oss/config.json");
  analyzer::RecommendOptions o;
  o.model = &model;
  o.tokens_per_rank = 32;
  const auto rec = analyzer::recommend(t, o);
  EXPECT_NE(rec.hardware.description.find("scaled to the trace's MI300X by the datasheets"), std::string::npos)
      << rec.hardware.description;
  ASSERT_EQ(rec.layers.size(), 24u);
  const auto& L = rec.layers[0];
  EXPECT_TRUE(L.workload.gated);
  EXPECT_EQ(L.workload.ffn_hidden(), 4320);
  ASSERT_TRUE(L.replay.computed);
  EXPECT_TRUE(L.replay.forward_only);
  const double weights_s = 32 * 3 * 2880.0 * 2880 * 2 / (2.6e12 * 5300 / 3350);
  EXPECT_NEAR(weights_s, 3.872e-4, 1e-7);
  EXPECT_GE(L.replay.simulated_s, weights_s);
  EXPECT_LT(L.replay.simulated_s, weights_s + 5e-5);
  // The ridge in rows an expert: 2 B a weight element x 600 x 1307.4 /
  // 989.5 TFLOP/s / (2 x 4.1134 TB/s) = 192.7; 4 rows here.
  EXPECT_TRUE(std::any_of(rec.notes.begin(), rec.notes.end(), [](const std::string& n) {
    return n.starts_with("layers 0-23: the expert GEMMs are bound by their weights on h100-nvlink-ib@MI300X (under "
                         "about 193 rows an expert") &&
           n.find("a pipeline degree r reads the weights r times") != std::string::npos;
  })) << fmt::format("{}", fmt::join(rec.notes, "\n"));
}

}  // namespace
}  // namespace moetrace::testing
