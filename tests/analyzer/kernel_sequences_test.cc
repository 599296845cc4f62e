// HTA's frequent CUDA kernel sequences (kernel_sequences.h). The golden
// numbers of the hand-written trace are derived in the comments from its
// times; those of the real trace come from
// tests/analyzer/hta_kernel_sequences_reference.py, which re-states HTA's
// definition in plain Python over the raw JSON.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <sstream>
#include <string>

#include "json_schema.h"
#include "kineto_fixture.h"
#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/kernel_sequences.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/schema/error.h"
#include "shared_data.h"
#include "test_paths.h"

namespace moetrace::testing {
namespace {

using analyzer::frequent_kernel_sequences;
using analyzer::KernelSequenceOptions;

// Names as PyTorch, cuBLAS and Megatron-Core write them.
constexpr const char* kGemm =
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
    "cublas";
constexpr const char* kRouterGemm =
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize64x64x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
    "cublas";
constexpr const char* kAdd =
    "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<c10::BFloat16>, "
    "at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<c10::BFloat16>, at::detail::Array<char*, 3>)";
constexpr const char* kLayerNorm =
    "void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<c10::BFloat16, float>(int, float, "
    "c10::BFloat16 const*, c10::BFloat16 const*, c10::BFloat16 const*, float*, float*, c10::BFloat16*)";

// Two profiler steps (o = 0 and 1000 us); thread 1 runs the forward, thread
// 2 the autograd engine. Depths on thread 1: ProfilerStep#k 0, the modules
// 1, their ops 2, ops in TEColumnParallelLinear 3.
//   thread 1
//   [o, o+900)          ProfilerStep#k
//   [o+10, o+60)          nn.Module: TopKRouter_0
//   [o+20, o+40)            aten::mm             router GEMM [o+100, o+110)
//   [o+70, o+400)         nn.Module: SequentialMLP_0
//   [o+80, o+150)           aten::linear (L1)   > aten::addmm: memset [o+150,152), GEMM [152,182), add [182,186)
//   [o+160, o+230)          aten::linear (L2)   step 0: GEMM (stream 7) launched first, layer norm
//                                               (stream 13) second but starting first: LN [190,196),
//                                               GEMM [200,230), add [230,234)
//                                               step 1: as L1: memset [200,202), GEMM [202,232), add [232,236)
//   [o+240, o+320)          nn.Module: TEColumnParallelLinear_0
//   [o+250, o+310)            aten::linear (depth 3): GEMM [300,330), add [330,334), add [334,338)
//   [o+330, o+390)          aten::linear (L4)   GEMM [400,430), add [430,434): two events only
//   thread 2
//   [o+500, o+600)      autograd::engine::evaluate_function: MmBackward0
//   [o+505, o+595)        MmBackward0
//   [o+510, o+540)          aten::mm            router GEMM [o+610, o+620)
//   [o+545, o+590)          aten::mm            router GEMM [o+620, o+630)
std::string write_trace() {
  Kineto k;
  for (int step = 0; step < 2; ++step) {
    const double o = 1000.0 * step;
    k.range("ProfilerStep#" + std::to_string(step), o, 900);
    k.range("nn.Module: TopKRouter_0", o + 10, 50, 1, "python_function");
    k.range("aten::mm", o + 20, 20, 1, "cpu_op");
    k.kernel(kRouterGemm, 7, o + 100, 10, o + 25);
    k.range("nn.Module: SequentialMLP_0", o + 70, 330, 1, "python_function");
    k.range("aten::linear", o + 80, 70, 1, "cpu_op");
    k.range("aten::addmm", o + 85, 60, 1, "cpu_op");
    k.memset(7, o + 150, 2, o + 90);
    k.kernel(kGemm, 7, o + 152, 30, o + 100);
    k.kernel(kAdd, 7, o + 182, 4, o + 120);
    k.range("aten::linear", o + 160, 70, 1, "cpu_op");
    if (step == 0) {
      k.kernel(kGemm, 7, o + 200, 30, o + 170);
      k.kernel(kLayerNorm, 13, o + 190, 6, o + 180);
      k.kernel(kAdd, 7, o + 230, 4, o + 190);
    } else {
      k.memset(7, o + 200, 2, o + 170);
      k.kernel(kGemm, 7, o + 202, 30, o + 180);
      k.kernel(kAdd, 7, o + 232, 4, o + 190);
    }
    k.range("nn.Module: TEColumnParallelLinear_0", o + 240, 80, 1, "python_function");
    k.range("aten::linear", o + 250, 60, 1, "cpu_op");
    k.kernel(kGemm, 7, o + 300, 30, o + 260);
    k.kernel(kAdd, 7, o + 330, 4, o + 270);
    k.kernel(kAdd, 7, o + 334, 4, o + 280);
    k.range("aten::linear", o + 330, 60, 1, "cpu_op");
    k.kernel(kGemm, 7, o + 400, 30, o + 340);
    k.kernel(kAdd, 7, o + 430, 4, o + 350);
    k.range("autograd::engine::evaluate_function: MmBackward0", o + 500, 100, 2, "cpu_op");
    k.range("MmBackward0", o + 505, 90, 2, "cpu_op");
    k.range("aten::mm", o + 510, 30, 2, "cpu_op");
    k.kernel(kRouterGemm, 7, o + 610, 10, o + 515, 2);
    k.range("aten::mm", o + 545, 45, 2, "cpu_op");
    k.kernel(kRouterGemm, 7, o + 620, 10, o + 550, 2);
  }
  return k.write("kernel_sequences.json");
}

const analyzer::Trace& trace() {
  static const analyzer::Trace t = import_and_load({write_trace()}, temp_path("kernel_sequences.db"));
  return t;
}

std::string pattern(std::initializer_list<const char*> names) {
  std::string p;
  for (const char* n : names) p += (p.empty() ? "" : "|") + std::string(n);
  return p;
}

// One pattern's figures, HTA's columns.
void expect_sequence(const analyzer::KernelSequence& s, const std::string& pattern, std::int64_t count,
                     std::int64_t gpu_ns, std::int64_t cpu_ns) {
  EXPECT_EQ(s.pattern(), pattern);
  EXPECT_EQ(s.count, count) << pattern;
  EXPECT_EQ(s.gpu_kernel_duration_ns, gpu_ns) << pattern;
  EXPECT_EQ(s.cpu_op_duration_ns, cpu_ns) << pattern;
}

TEST(KernelSequences, ShallowestOpsAndTheirGpuEventsInStartOrder) {
  const auto k = frequent_kernel_sequences(trace());  // aten::linear, min 3, top 5, the whole trace
  EXPECT_EQ(k.rank, 0);
  // 4 aten::linear per step; the one in TEColumnParallelLinear is at depth 3,
  // the other three at 2: 6 roots, of which L4 (2 events) in each step is short.
  EXPECT_EQ(k.candidates, 8);
  EXPECT_EQ(k.depth, 2);
  EXPECT_EQ(k.roots, 6);
  EXPECT_EQ(k.short_roots, 2);
  EXPECT_EQ(k.patterns, 2);
  ASSERT_EQ(k.sequences.size(), 2u);
  // L1 twice and step 1's L2: memset 2 + GEMM 30 + add 4 = 36 us each, 108
  // us; CPU 3 x 70 us.
  expect_sequence(k.sequences[0], pattern({"aten::linear", "Memset (Device)", kGemm, kAdd}), 3, 108'000, 210'000);
  // Step 0's L2, by GPU start: the layer norm (launched second) first;
  // 6 + 30 + 4 = 40 us; CPU 70 us.
  expect_sequence(k.sequences[1], pattern({"aten::linear", kLayerNorm, kGemm, kAdd}), 1, 40'000, 70'000);
}

TEST(KernelSequences, BackwardThreadHangsUnderTheStep) {
  // "aten::mm" (not in "aten::addmm"): the router's at depth 2 on thread 1,
  // two per step on thread 2 at depth 2 of their thread, 3 once hung under
  // ProfilerStep#k: only the router's are roots (without the link all six
  // would be). One GEMM each: 10 us; CPU 20 us.
  KernelSequenceOptions o;
  o.operator_name = "aten::mm";
  o.min_pattern_len = 1;
  const auto k = frequent_kernel_sequences(trace(), o);
  EXPECT_TRUE(k.backward_linked);
  EXPECT_EQ(k.candidates, 6);
  EXPECT_EQ(k.depth, 2);
  EXPECT_EQ(k.roots, 2);
  ASSERT_EQ(k.sequences.size(), 1u);
  expect_sequence(k.sequences[0], pattern({"aten::mm", kRouterGemm}), 2, 20'000, 40'000);
}

TEST(KernelSequences, NamesMatchCaseSensitively) {
  // "Linear" is in the module's name, not in aten::linear: one root per step
  // (depth 2) with the three events of the aten::linear inside it: GEMM 30 +
  // add 4 + add 4 = 38 us; CPU 80 us.
  KernelSequenceOptions o;
  o.operator_name = "Linear";
  const auto k = frequent_kernel_sequences(trace(), o);
  EXPECT_EQ(k.candidates, 2);
  EXPECT_EQ(k.depth, 2);
  ASSERT_EQ(k.sequences.size(), 1u);
  expect_sequence(k.sequences[0], pattern({"nn.Module: TEColumnParallelLinear_0", kGemm, kAdd, kAdd}), 2, 76'000,
                  160'000);
  o.operator_name = "profilerstep";
  EXPECT_EQ(frequent_kernel_sequences(trace(), o).candidates, 0);
}

TEST(KernelSequences, HtaWindowAndTopK) {
  // HTA's window leaves out what was launched from the last step's start
  // (1000 us) on: step 1's three roots have no events and step 0's L4 two,
  // so 4 are short; L1 and L2 of step 0 once each, tied, by pattern:
  // "Memset" < "void".
  KernelSequenceOptions o;
  o.window = analyzer::RankWindow::kHta;
  auto k = frequent_kernel_sequences(trace(), o);
  EXPECT_EQ(k.roots, 6);
  EXPECT_EQ(k.short_roots, 4);
  ASSERT_EQ(k.sequences.size(), 2u);
  EXPECT_EQ(k.sequences[0].count, 1);
  EXPECT_EQ(k.sequences[0].gpu_kernel_duration_ns, 36'000);
  EXPECT_EQ(k.sequences[1].count, 1);
  EXPECT_EQ(k.sequences[1].kernels.front(), kLayerNorm);
  o.top_k = 1;
  k = frequent_kernel_sequences(trace(), o);
  EXPECT_EQ(k.patterns, 2);
  ASSERT_EQ(k.sequences.size(), 1u);
  EXPECT_EQ(k.sequences[0].kernels.front(), "Memset (Device)");
}

TEST(KernelSequences, BadOptionsAreOneLineErrors) {
  KernelSequenceOptions o;
  o.operator_name = "";
  EXPECT_THROW(frequent_kernel_sequences(trace(), o), ConfigError);
  o = {};
  o.min_pattern_len = -1;
  EXPECT_THROW(frequent_kernel_sequences(trace(), o), ConfigError);
  o = {};
  o.rank = 3;
  try {
    frequent_kernel_sequences(trace(), o);
    ADD_FAILURE() << "rank 3 accepted";
  } catch (const ConfigError& e) {
    EXPECT_STREQ(e.what(), "kernel sequences: rank 3 is not in the trace (its ranks: 0)");
  }
}

TEST(KernelSequences, ReportSectionInEveryFormat) {
  const auto a = analyzer::analyze(trace(), {}, {}, 1);
  ASSERT_EQ(a.kernel_sequences.sequences.size(), 2u);
  analyzer::ReportOptions ro;
  ro.format = analyzer::ReportFormat::kJson;
  const auto j = analyzer::report_json(trace(), a, ro);
  EXPECT_EQ(schema_errors(j, std::string(MOETRACE_SOURCE_DIR) + "/schemas/report.schema.json"),
            std::vector<std::string>{});
  const auto& ks = j.at("kernel_sequences");
  EXPECT_EQ(ks.at("operator"), "aten::linear");
  EXPECT_EQ(ks.at("sequences").at(0).at("count"), 3);
  EXPECT_EQ(ks.at("sequences").at(1).at("kernels").at(0), kLayerNorm);
  for (const auto format : {analyzer::ReportFormat::kText, analyzer::ReportFormat::kMarkdown,
                            analyzer::ReportFormat::kHtml}) {
    std::ostringstream out;
    ro.format = format;
    analyzer::write_report(out, trace(), a, ro);
    EXPECT_NE(out.str().find("Frequent CUDA kernel sequences"), std::string::npos);
    EXPECT_NE(out.str().find("Memset (Device)"), std::string::npos);
  }
}

// hta-sampled_rank-0 (HTA's test data): expected numbers from
// hta_kernel_sequences_reference.py.
TEST(KernelSequences, HtaSampledTraceAsHtaDefinesThem) {
  const auto path = shared_data("kineto/hta-sampled_rank-0.json.gz");
  MOETRACE_NEED_SHARED(path);
  const auto t = analyzer::load_trace(path);
  // aten::linear launches one or two kernels: with HTA's min_pattern_len 3
  // every root is short.
  auto k = frequent_kernel_sequences(t);
  EXPECT_EQ(k.candidates, 113);
  EXPECT_EQ(k.depth, 4);
  EXPECT_EQ(k.roots, 78);
  EXPECT_EQ(k.short_roots, 78);
  EXPECT_TRUE(k.sequences.empty());
  KernelSequenceOptions o;
  o.min_pattern_len = 1;
  o.top_k = 0;
  k = frequent_kernel_sequences(t, o);
  EXPECT_TRUE(k.backward_linked);
  EXPECT_EQ(k.short_roots, 0);
  EXPECT_EQ(k.patterns, 18);
  ASSERT_EQ(k.sequences.size(), 18u);
  std::int64_t count = 0;
  for (const auto& s : k.sequences) count += s.count;
  EXPECT_EQ(count, 78);
  EXPECT_EQ(k.sequences[0].count, 8);
  EXPECT_EQ(k.sequences[0].pattern(),
            "aten::linear|void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_128x64_32x6_tn_align4>("
            "cutlass_80_tensorop_s1688gemm_128x64_32x6_tn_align4::Params)");
  EXPECT_EQ(k.sequences[2].count, 8);
  EXPECT_EQ(k.sequences[3].count, 6);
  EXPECT_EQ(k.sequences[5].count, 5);
  EXPECT_EQ(k.sequences[5].kernels.size(), 2u);
  EXPECT_EQ(k.sequences[5].kernels[0], "ampere_sgemm_32x128_tn");
  // The optimizer's step: Shampoo's two steps launch 31 events each.
  o.operator_name = "Optimizer";
  o.min_pattern_len = 3;
  k = frequent_kernel_sequences(t, o);
  EXPECT_EQ(k.roots, 4);
  ASSERT_EQ(k.sequences.size(), 3u);
  EXPECT_EQ(k.sequences[0].op, "Optimizer.step#EMAOptimizer.step");
  EXPECT_EQ(k.sequences[0].count, 2);
  EXPECT_EQ(k.sequences[0].kernels.size(), 8u);
  EXPECT_EQ(k.sequences[1].op, "Optimizer.step#Shampoo.step");
  EXPECT_EQ(k.sequences[1].kernels.size(), 31u);
}

}  // namespace
}  // namespace moetrace::testing
