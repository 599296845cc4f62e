// Inference engines: decode steps of vLLM, SGLang and TensorRT-LLM as their
// traces name them (custom ops, step ranges, kernels; names from their
// public source, in the `source` of each rule and below), tensor-parallel
// all-reduce, the header's rank count and the rule a report suggests for
// MoE-looking kernels no rule knows. Expected numbers are derived by hand
// beside each test.
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kineto_fixture.h"
#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/kernel_classes.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/trace.h"

namespace moetrace::testing {
namespace {

// One engine's names for a decode step of two MoE layers.
struct Engine {
  const char* name;
  const char* step;      // step range ("" = none: iterations from the layers' periodicity)
  const char* step_cat;
  const char* layer;     // layer range, "{}" = instance ("" = none: layers by kernel order)
  const char* experts;   // expert op range ("" = none)
  const char* gate_kernel, *align_kernel, *expert_kernel, *finalize_kernel, *all_reduce_kernel;
  bool all_reduce_in_layer;  // the layer's range holds its all-reduce
};

// vLLM: torch.ops.vllm.moe_forward around FusedMoE (cpu_op vllm::moe_forward),
// vllm::outplace_fused_experts inside; kernels of csrc/moe
// (topkGatingSoftmax, moe_align_block_size_kernel), the Triton
// fused_moe_kernel, moe_sum_kernel, and the custom all-reduce
// (csrc/custom_all_reduce.cuh). Step: Worker.annotate_profile's
// execute_context_{n}({tokens})_generation_{n}({tokens}).
// SGLang: Qwen2-MoE's block (python/sglang/srt/models/qwen2_moe.py,
// Qwen2MoeSparseMoeBlock), sglang::inplace_fused_experts, sgl-kernel's
// moe_fused_gate_kernel and moe_align_block_size_kernel, the Triton
// fused_moe_kernel; no step range (SGLang's profiler marks none): the
// periodicity of the block's module range gives the steps. All-reduce:
// PyTorch's symmetric-memory multimem_all_reduce_kernel.
// TensorRT-LLM: the executor's _forward_step NVTX range, trtllm::fused_moe,
// trtllm-gen kernels (moe::dev::routing, bmm_* batched GEMMs,
// moe::dev::finalize) and allreduce_fusion_kernel_oneshot_lamport
// (cpp/tensorrt_llm/kernels/communicationKernels/allReduceFusionKernels.cu).
const Engine kEngines[] = {
    {"vllm", "execute_context_0(0)_generation_{}(16)", "user_annotation", "vllm::moe_forward",
     "vllm::outplace_fused_experts",
     "void vllm::moe::topkGatingSoftmax<8, 8, 4, 16, 32, int, float>(float const*, bool const*, float*, int, int*, "
     "int, int, int, int, bool)",
     "void vllm::moe::moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, int, unsigned long, "
     "int*)",
     "fused_moe_kernel", "void vllm::moe::moe_sum_kernel<c10::BFloat16, 2>(c10::BFloat16*, c10::BFloat16 const*, int)",
     "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, vllm::Signal*, "
     "__nv_bfloat16*, int, int)",
     true},
    {"sglang", "", "", "nn.Module: Qwen2MoeSparseMoeBlock_{}", "sglang::inplace_fused_experts",
     "void moe_fused_gate_kernel<float, 8, 2>(void*, void*, float*, int*, long, long, long, long, long, long, double)",
     "void moe_align_block_size_kernel<int>(int const*, int*, int*, int*, int, int, int, unsigned long, int*)",
     "fused_moe_kernel", "void moe_sum_reduce_kernel<__nv_bfloat16>(__nv_bfloat16 const*, __nv_bfloat16*, int, int)",
     "void c10d::symmetric_memory::multimem_all_reduce_kernel<__nv_bfloat16, 8, 16>(__nv_bfloat16*, unsigned long, "
     "unsigned long, unsigned int**, unsigned long, unsigned long)",
     true},
    {"tensorrt_llm", "_forward_step", "user_annotation", "", "trtllm::fused_moe",
     "void moe::dev::routing::routingRenormalize::routingIndicesBlockKernel<moe::dev::routing::routingRenormalize::"
     "KernelParams<__nv_bfloat16, __nv_bfloat16, 128, 8, true>>(moe::dev::routing::routingRenormalize::KernelParams<"
     "__nv_bfloat16, __nv_bfloat16, 128, 8, true>)",
     "void moe::dev::permute::permuteKernel<moe::dev::permute::KernelParams<__nv_bfloat16, 8>>(moe::dev::permute::"
     "KernelParams<__nv_bfloat16, 8>)",
     "bmm_E2m1_E2m1E2m1_Fp32_t128x8x512u2_s3_et64x8_m64x8x64_cga1x1x1_16dp256b_TN_transOut_schedS_biasM_bN_swiGlu_"
     "dynBatch_sm100a",
     "void moe::dev::finalize::finalizeKernelVecLoad<moe::dev::finalize::KernelParams<__nv_bfloat16, __nv_bfloat16, "
     "true>>(moe::dev::finalize::KernelParams<__nv_bfloat16, __nv_bfloat16, true>)",
     "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<__nv_bfloat16, 8, true>("
     "tensorrt_llm::kernels::ar_fusion::AllReduceFusionParams<__nv_bfloat16>)",
     false},
};

constexpr const char* kAttention = "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>()";

class DecodeSteps : public ::testing::TestWithParam<Engine> {};

// Three decode steps of two layers. Step s at GPU time 1000 s us, layer l at
// o = 1000 s + 100 + 300 l: attention [o-50,o-10] (no MoE work), then the
// MoE layer: gate [o,o+10], align [o+10,o+20], experts [o+20,o+120],
// finalize [o+120,o+130], all-reduce [o+130,o+150]. By hand, per layer and
// step: window 150 us, all-reduce 20 us, all-to-all 0; 3 iterations of 2
// layers, forward only. TensorRT-LLM names no layer range: its all-reduce
// (fused with the next norm) is outside the layer, whose window ends with
// the finalize: 130 us, no all-reduce.
TEST_P(DecodeSteps, StepsAreIterationsOfTheirLayersForwardOnly) {
  const auto& e = GetParam();
  Kineto k;
  for (int s = 0; s < 3; ++s) {
    const double hs = 10 + 200.0 * s;  // host time of the step
    if (*e.step) k.range(fmt::format(fmt::runtime(e.step), 16 + s), hs, 190, 1, e.step_cat);
    for (int l = 0; l < 2; ++l) {
      const double h = hs + 10 + 80.0 * l, o = 1000.0 * s + 100 + 300.0 * l;
      k.kernel(kAttention, 7, o - 50, 40, h);
      if (*e.layer) k.range(fmt::format(fmt::runtime(e.layer), 2 * l + 1), h + 2, 60, 1, "cpu_op");
      k.kernel(e.gate_kernel, 7, o, 10, h + 3);
      k.kernel(e.align_kernel, 7, o + 10, 10, h + 5);
      if (*e.experts) k.range(e.experts, h + 7, 20, 1, "cpu_op");
      k.kernel(e.expert_kernel, 7, o + 20, 100, h + 8);
      k.kernel(e.finalize_kernel, 7, o + 120, 10, h + 30);
      k.kernel(e.all_reduce_kernel, 7, o + 130, 20, h + 40);
    }
  }
  const auto t = import_and_load({k.write(std::string("decode_") + e.name + ".json", 0, 8)},
                                 temp_path(std::string("decode_") + e.name + ".db"));
  ASSERT_TRUE(t.recognition.moe);
  EXPECT_FALSE(t.recognition.phases_marked);
  EXPECT_TRUE(t.recognition.ambiguities.empty()) << t.recognition.ambiguities.front();
  EXPECT_EQ(analyzer::classify_kernel_name(e.all_reduce_kernel), Category::kAllReduce);
  EXPECT_EQ(op_of_kernel(t, e.expert_kernel, 1420).kind, OpKind::kExpertFfn);
  EXPECT_EQ(op_of_kernel(t, e.expert_kernel, 1420).layer, 1);
  EXPECT_EQ(op_of_kernel(t, e.expert_kernel, 1420).iteration, 1);
  EXPECT_EQ(op_of_kernel(t, e.gate_kernel, 2100).kind, OpKind::kGate);
  EXPECT_EQ(op_of_kernel(t, e.finalize_kernel, 220).kind, OpKind::kUnpermute);
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.iterations.size(), 3u);
  ASSERT_EQ(b.layers.size(), 2u);
  for (const auto& l : b.layers) {
    SCOPED_TRACE(l.layer);
    EXPECT_EQ(l.iterations, 3);
    EXPECT_EQ(l.mean_window_ns, e.all_reduce_in_layer ? 150'000 : 130'000);
    EXPECT_EQ(l.backward.window_ns, 0);
    EXPECT_EQ(l.total.at(Category::kAllReduce), e.all_reduce_in_layer ? 3 * 20'000 : 0);
    EXPECT_EQ(l.total.at(Category::kAllToAll), 0);
  }
  // One rank of a tensor-parallel job of eight: the header says so.
  std::ostringstream text;
  analyzer::write_text_report(text, t, analyzer::analyze(t), analyzer::ReportOptions{});
  EXPECT_NE(text.str().find("1 of 8 ranks"), std::string::npos);
  EXPECT_NE(text.str().find("forward only"), std::string::npos);
  // The JSON says so too and has no backward split to mislead with zeros.
  EXPECT_TRUE(b.forward_only());
  const auto j = analyzer::report_json(t, analyzer::analyze(t), analyzer::ReportOptions{});
  EXPECT_TRUE(j["breakdown"]["forward_only"].get<bool>());
  ASSERT_EQ(j["breakdown"]["layers"].size(), 2u);
  for (const auto& l : j["breakdown"]["layers"]) {
    EXPECT_TRUE(l.contains("forward"));
    EXPECT_FALSE(l.contains("backward"));
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, DecodeSteps, ::testing::ValuesIn(kEngines),
                         [](const ::testing::TestParamInfo<Engine>& i) { return std::string(i.param.name); });

// Tensor-parallel all-reduce kernels are all-reduce, never all-to-all, in
// any namespace and spelling (names from the sources above; NCCL's and
// RCCL's AllReduce kernels as NCCL names them).
TEST(TensorParallelAllReduce, NeverAllToAll) {
  for (const char* name : {"multimem_all_reduce_kernel", "void acme::cross_device_reduce_2stage<float, 4>(float*)",
                           "void aiter::cross_device_reduce_1stage_naive<__hip_bfloat16, 8>(aiter::RankData*)",
                           "oneShotAllReduceKernel", "void tensorrt_llm::kernels::twoShotAllReduceKernel<float>()",
                           "void quickreduce::allreduce_prototype_twoshot<quickreduce::CodecFP<half>>()",
                           "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevKernelArgsStorage<4096ul>)"})
    EXPECT_EQ(analyzer::classify_kernel_name(name), Category::kAllReduce) << name;
}

// A kernel that looks like MoE work but that no rule knows: the suggested
// rule, read as a user's kernel rule, classifies it, and the same function
// under another namespace.
TEST(SuggestedKernelRule, ClassifiesTheKernelItWasMadeFor) {
  struct Case {
    const char* name;  // from public source, unknown to the built-in rules
    const char* renamed;
    Category category;
    const char* kind;
  };
  const Case cases[] = {
      // The TraceLens vLLM traces: Inductor's pad before vllm::moe_forward.
      {"triton_poi_fused_constant_pad_nd_moe_forward_0", "triton_poi_fused_constant_pad_nd_moe_forward_0",
       Category::kOtherCompute, ""},
      // vLLM csrc/moe/grouped_topk_kernels.cu.
      {"void vllm::moe::grouped_topk_fused_kernel<__nv_bfloat16, float>(__nv_bfloat16*, float*, int*)",
       "void fork::grouped_topk_fused_kernel<half, float>()", Category::kGating, "gate"},
      // vLLM csrc/moe/moe_wna16.cu.
      {"void moe_wna16_gemm_kernel<__nv_bfloat16, 4, 128, 64>(__nv_bfloat16 const*, __nv_bfloat16*)",
       "void x::y::moe_wna16_gemm_kernel<half, 8, 64, 32>()", Category::kExpertCompute, "expert"},
      // vLLM csrc/moe/moe_lora_align_sum_kernels.cu.
      {"void vllm::moe::moe_lora_align_sum_kernel<int>(int*, int*, int)",
       "void fork::moe_lora_align_sum_kernel<long>(long*)", Category::kOtherCompute, "permute"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_EQ(analyzer::match_kernel_rule(c.name), -1);  // unknown today
    const auto line = analyzer::suggested_kernel_rule(c.name);
    ASSERT_FALSE(line.empty());
    const auto rule = nlohmann::json::parse(line);
    EXPECT_EQ(rule.value("kind", std::string()), c.kind);
    const auto rules =
        analyzer::parse_kernel_rules(nlohmann::json{{"rules", nlohmann::json::array({rule})}}.dump(), "suggested");
    ASSERT_EQ(rules.size(), 1u);
    EXPECT_EQ(rules[0].category, c.category);
    EXPECT_NE(analyzer::match_kernel_rule(rules, c.name), nullptr);
    EXPECT_NE(analyzer::match_kernel_rule(rules, c.renamed), nullptr);
  }
  // Names with no MoE word get none.
  EXPECT_EQ(analyzer::suggested_kernel_rule("void at::native::vectorized_gather_kernel<16, long>(char*)"), "");
  EXPECT_EQ(analyzer::suggested_kernel_rule("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n"), "");
}

}  // namespace
}  // namespace moetrace::testing
