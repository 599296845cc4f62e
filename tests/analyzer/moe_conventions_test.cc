// One MoE step in every supported framework's convention, recognised into
// the same per-layer numbers (Kineto traces and an Nsight Systems export).
#include <gtest/gtest.h>

#include <algorithm>
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

// --- one MoE step in every supported framework's convention ----------------------

// Two forward MoE layers with the same GPU work, named the way each
// framework's trace names them. Per layer k (offset 100k us): gate kernel
// [100,110], all-to-all [110,130], expert GEMM [130,170], all-to-all
// [170,190]. By hand, each layer's forward row: window 90 us, all-to-all
// 40 us, gating 10 us, expert 40 us; nothing hidden (one op at a time).
// The GEMMs are plain cuBLAS kernels whose names say nothing of MoE, so the
// ranges of the framework's preset do the work; where a convention has no
// range for the gate or the experts, the kernel is one whose name says
// what it is (a top-k gating kernel, a grouped GEMM). Module instance numbers
// start where a real model's would (MoE every other layer: 1, 3).
struct Convention {
  const char* name;
  const char* preset;    // the preset whose rule must fire
  const char* layer;     // layer range, "{}" = instance number; "" = none
  const char* gate;      // gate range; "" = none
  const char* dispatch;  // dispatch range; "" = none
  const char* expert;    // expert range ("" = none)
  const char* combine;   // combine range; "" = none
  bool expert_spans_a2a = false;  // torchtitan: the all-to-alls run in hooks of the experts module
  const char* cat = "python_function";
};

const Convention kConventions[] = {
    {"moetrace", "", "moetrace:layer layer={}", "moetrace:gate", "moetrace:dispatch", "moetrace:expert",
     "moetrace:combine", false, "user_annotation"},
    {"megatron", "megatron-core", "nn.Module: MoELayer_{}", "nn.Module: TopKRouter_{}", "", "nn.Module: TEGroupedMLP_{}",
     ""},
    {"megatron_overlap", "megatron-core", "", "", "moe_dispatch forward", "mlp forward", "moe_combine forward", false,
     "user_annotation"},
    {"deepspeed", "deepspeed", "nn.Module: MOELayer_{}", "nn.Module: TopKGate_{}", "", "nn.Module: Experts_{}", ""},
    {"tutel", "tutel", "nn.Module: MOELayer_{}", "nn.Module: LinearTopKGate_{}", "", "nn.Module: FusedExpertsNetwork_{}",
     ""},
    {"fastmoe", "fastmoe", "nn.Module: FMoETransformerMLP_{}", "nn.Module: NaiveGate_{}", "", "nn.Module: _Expert_{}", ""},
    {"torchtitan", "torchtitan", "nn.Module: MoE_{}", "nn.Module: TokenChoiceTopKRouter_{}", "",
     "nn.Module: GroupedExperts_{}", "", true},
    {"deepspeed_fastmoe_functions", "fastmoe", "nn.Module: MOELayer_{}", "", "MOEScatter", "", "MOEGather", false,
     "cpu_op"},
    // A DualPipe-style schedule's own words, in mixed case and separators.
    {"schedule_words", "schedules", "", "Router(F)", "dispatch[f]", "MLP_fwd", "Combine (FWD)", false, "user_annotation"},
    // pplx-kernels' host ranges (nvtxRangePush("dispatch") / ("combine")).
    {"pplx", "pplx", "", "", "dispatch", "", "combine", false, "user_annotation"},
};

class EveryConvention : public ::testing::TestWithParam<Convention> {};

TEST_P(EveryConvention, SameStepSameNumbers) {
  const auto& c = GetParam();
  constexpr const char* kGemm = "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_kernel__5x_cublas";
  const std::string gate_kernel =
      *c.gate ? kGemm : "void topkGatingSoftmax<float, 8>(float const*, bool const*, float*, int, int*, int*, int, int, int)";
  const std::string expert_kernel = *c.expert ? kGemm : "cutlass_80_tensorop_bf16_grouped_gemm_kernel";
  Kineto k;
  k.range("ProfilerStep#7", 0, 1000, 1, "user_annotation");
  for (int l = 0; l < 2; ++l) {
    const double h = 50.0 * l, g = 100.0 * l;
    // Our convention numbers layers; module names number instances of a class.
    const bool numbered = std::string_view(c.name) == "moetrace";
    auto name = [&](const char* pattern) { return fmt::format(fmt::runtime(pattern), numbered ? l : 2 * l + 1); };
    if (*c.layer) k.range(name(c.layer), 10 + h, 35, 1, c.cat);
    if (*c.gate) k.range(name(c.gate), 11 + h, 3, 1, c.cat);
    k.kernel(gate_kernel, 7, 100 + g, 10, 12 + h);
    if (c.expert_spans_a2a) k.range(name(c.expert), 15 + h, 18, 1, c.cat);
    if (*c.dispatch) k.range(name(c.dispatch), 15 + h, 3, 1, c.cat);
    k.kernel(kA2a, 13, 110 + g, 20, 16 + h);
    if (*c.expert && !c.expert_spans_a2a) k.range(name(c.expert), 20 + h, 5, 1, c.cat);
    k.kernel(expert_kernel, 7, 130 + g, 40, 21 + h);
    if (*c.combine) k.range(name(c.combine), 30 + h, 3, 1, c.cat);
    k.kernel(kA2a, 13, 170 + g, 20, 31 + h);
  }
  const auto t = import_and_load({k.write(std::string(c.name) + ".json")}, temp_path(std::string(c.name) + ".db"));
  ASSERT_TRUE(t.recognition.moe) << c.name;
  EXPECT_TRUE(t.recognition.ambiguities.empty()) << c.name << ": " << t.recognition.ambiguities.front();
  if (*c.preset) {
    const std::string prefix = std::string(c.preset) + ": ";
    EXPECT_TRUE(std::any_of(t.recognition.rules_used.begin(), t.recognition.rules_used.end(),
                            [&](const auto& r) { return r.first.rfind(prefix, 0) == 0; }))
        << c.name << ": no rule of preset " << c.preset << " fired";
  } else {
    EXPECT_GT(t.recognition.annotations, 0) << c.name;
  }
  EXPECT_EQ(t.recognition.rules_used.count("pytorch: profiler step (iteration)"), 1u) << c.name;
  EXPECT_EQ(op_of_kernel(t, kA2a, 110).kind, OpKind::kDispatchAllToAll) << c.name;
  EXPECT_EQ(op_of_kernel(t, kA2a, 270).kind, OpKind::kCombineAllToAll) << c.name;
  EXPECT_EQ(op_of_kernel(t, kA2a, 270).layer, 1) << c.name;
  EXPECT_EQ(op_of_kernel(t, gate_kernel, 200).kind, OpKind::kGate) << c.name;
  EXPECT_EQ(op_of_kernel(t, expert_kernel, 230).kind, OpKind::kExpertFfn) << c.name;
  EXPECT_EQ(op_of_kernel(t, expert_kernel, 230).phase, Phase::kForward) << c.name;
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.layers.size(), 2u) << c.name;
  for (const auto& l : b.layers) {
    SCOPED_TRACE(std::string(c.name) + " layer " + std::to_string(l.layer));
    expect_times(l.forward, 90'000,
                 {{Category::kAllToAll, 40'000}, {Category::kGating, 10'000}, {Category::kExpertCompute, 40'000}});
    EXPECT_EQ(l.forward.comm_hidden_ns, 0) << c.name;
    EXPECT_EQ(l.iterations, 1) << c.name;
  }
  ASSERT_EQ(b.iterations.size(), 1u);
  EXPECT_EQ(b.iterations[0].iteration, 7);
}

INSTANTIATE_TEST_SUITE_P(Frameworks, EveryConvention, ::testing::ValuesIn(kConventions),
                         [](const ::testing::TestParamInfo<Convention>& i) { return std::string(i.param.name); });

// The convention in an Nsight Systems export: NVTX ranges of the domain
// "moetrace" without the prefix (registered domain name, eventType 75), and
// Megatron's schedule-node ranges in the default domain. Same step as above,
// one layer: window 90 us, all-to-all 40 us, backward row from "bwd".
TEST(MoeRecognition, ConventionInAnNsysExport) {
  const auto in = temp_path("convention.sqlite"), out = temp_path("convention.db");
  // pid 42, tid 43: globalTid 704643115; kernels in ns, host ranges in ns.
  make_export(in, std::string(kNsysExportTables) + R"(
    INSERT INTO StringIds VALUES
      (1, 'ncclDevKernel_AllToAll_RING_LL(ncclDevComm*, unsigned long, ncclWork*)'),
      (2, 'cudaLaunchKernel_v7000'), (3, 'moetrace'), (4, 'gemm_relu_kernel'), (5, 'router_logits_gemm');
    INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES
      (100000, 110000, 0, 7, 1, 704643072, 5, 1, 1, 1, 32, 1, 1),
      (110000, 130000, 0, 13, 2, 704643072, 1, 1, 1, 1, 32, 1, 1),
      (130000, 170000, 0, 7, 3, 704643072, 4, 1, 1, 1, 32, 1, 1),
      (170000, 190000, 0, 13, 4, 704643072, 1, 1, 1, 1, 32, 1, 1),
      (300000, 320000, 0, 13, 5, 704643072, 1, 1, 1, 1, 32, 1, 1);
    INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES (12000, 12500, 0, 704643115, 1, 2, 0),
      (16000, 16500, 0, 704643115, 2, 2, 0), (21000, 21500, 0, 704643115, 3, 2, 0),
      (31000, 31500, 0, 704643115, 4, 2, 0), (61000, 61500, 0, 704643115, 5, 2, 0);
    CREATE TABLE NVTX_EVENTS (start INTEGER, "end" INTEGER, eventType INTEGER, globalTid INTEGER, text TEXT,
      textId INTEGER, domainId INTEGER, int64Value INTEGER, doubleValue REAL, color INTEGER);
    INSERT INTO NVTX_EVENTS VALUES
      (0, NULL, 75, 704643115, NULL, 3, 7, NULL, NULL, NULL),
      (1000, 100000, 59, 704643115, 'iteration iter=2', NULL, 7, NULL, NULL, NULL),
      (10000, 45000, 59, 704643115, 'layer layer=0 phase=fwd', NULL, 7, NULL, NULL, NULL),
      (11000, 14000, 59, 704643115, 'gate', NULL, 7, NULL, NULL, NULL),
      (15000, 18000, 59, 704643115, 'moe_dispatch forward', NULL, 0, NULL, NULL, NULL),
      (20000, 25000, 59, 704643115, 'expert', NULL, 7, NULL, NULL, NULL),
      (30000, 33000, 59, 704643115, 'moe_combine forward', NULL, 0, NULL, NULL, NULL),
      (60000, 63000, 59, 704643115, 'moetrace:combine layer=0 phase=bwd', NULL, 0, NULL, NULL, NULL);
  )");
  importers::import_traces({in}, out);
  {
    // What the importer writes for an NCCL call with a message size in its
    // NVTX payload (NcclPayloadsGiveMessageSizesAndGroupSizes in the importer
    // tests): host times, no correlation id. The dispatch kernel was launched
    // at 16 us, inside it.
    sqlite::Database db(out, sqlite::Database::Mode::kReadWrite);
    db.exec("INSERT INTO collectives (rank, start_ns, end_ns, correlation_id, name, in_nelems, out_nelems, dtype) "
            "VALUES (0, 15500, 17000, NULL, 'ncclAllToAll', 4096, 4096, 'uint8')");
    // A row added after close no longer matches the writer's integrity record.
    db.exec("DELETE FROM meta WHERE key = 'integrity'");
  }
  const auto t = analyzer::load_trace(out);
  ASSERT_TRUE(t.recognition.moe);
  EXPECT_EQ(t.recognition.annotations, 5);  // iteration, layer, gate, expert, the prefixed combine
  EXPECT_EQ(op_of_kernel(t, kA2a, 110).bytes, 4096);  // the NCCL call's message size
  EXPECT_EQ(op_of_kernel(t, kA2a, 170).bytes, -1);    // launched outside any recorded call
  EXPECT_EQ(op_of_kernel(t, "router_logits_gemm", 100).kind, OpKind::kGate);
  EXPECT_EQ(op_of_kernel(t, kA2a, 110).kind, OpKind::kDispatchAllToAll);
  EXPECT_EQ(op_of_kernel(t, kA2a, 170).kind, OpKind::kCombineAllToAll);
  const auto& bwd = op_of_kernel(t, kA2a, 300);
  EXPECT_EQ(bwd.kind, OpKind::kCombineAllToAll);
  EXPECT_EQ(bwd.phase, Phase::kBackward);
  EXPECT_EQ(bwd.iteration, 2);
  const auto b = analyzer::compute_breakdown(t);
  ASSERT_EQ(b.layers.size(), 1u);
  expect_times(b.layers[0].forward, 90'000, {{Category::kAllToAll, 40'000}, {Category::kExpertCompute, 40'000}});
  EXPECT_EQ(b.layers[0].backward.window_ns, 20'000);
}

}  // namespace
}  // namespace moetrace::testing
