// Kernel classification by name (analyzer/data/kernel_classes.json).
#include "moetrace/analyzer/kernel_classes.h"

#include <gtest/gtest.h>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/schema/error.h"

namespace moetrace::analyzer {
namespace {

// Kernel names as NCCL, PyTorch and MoE libraries emit them (old
// ncclKernel_* names from NCCL < 2.19, ncclDevKernel_* from newer ones).
TEST(KernelClasses, NcclKernelsOldAndNewNames) {
  EXPECT_EQ(classify_kernel_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)"),
            Category::kAllReduce);
  EXPECT_EQ(classify_kernel_name("ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            Category::kAllReduce);
  EXPECT_EQ(classify_kernel_name("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)"),
            Category::kAllToAll);
  EXPECT_EQ(classify_kernel_name("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"), Category::kAllToAll);
  EXPECT_EQ(classify_kernel_name("ncclDevKernel_AllToAll"), Category::kAllToAll);
  EXPECT_EQ(classify_kernel_name("ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"),
            Category::kOtherComm);
  EXPECT_EQ(classify_kernel_name("ncclDevKernel_ReduceScatter_Sum_bf16_RING_LL"), Category::kOtherComm);
  EXPECT_EQ(classify_kernel_name("ncclKernel_Broadcast_RING_LL_Sum_int8_t"), Category::kOtherComm);
  EXPECT_EQ(classify_kernel_name("ncclDevKernel_Reduce_Sum_f32_RING_LL"), Category::kOtherComm);
}

TEST(KernelClasses, MoeComputeKernels) {
  EXPECT_EQ(classify_kernel_name("void cutlass::Kernel<cutlass::gemm::kernel::GemmGrouped<...>>(...)"),
            Category::kExpertCompute);
  EXPECT_EQ(classify_kernel_name("grouped_gemm::CutlassGroupedGemm"), Category::kExpertCompute);
  EXPECT_EQ(classify_kernel_name("fused_moe_kernel"), Category::kExpertCompute);
  EXPECT_EQ(classify_kernel_name("void tensorrt_llm::kernels::moe_gemm<half>"), Category::kExpertCompute);
  EXPECT_EQ(classify_kernel_name("void moe_permute_row_map(...)"), Category::kOtherCompute);
  // Permutes are recognised (other compute by rule, not by falling through).
  const int permute = match_kernel_rule("void moe_permute_row_map(...)");
  const int unpermute = match_kernel_rule("moe_unpermute_kernel");
  ASSERT_GE(permute, 0);
  ASSERT_GE(unpermute, 0);
  EXPECT_NE(permute, unpermute);
  EXPECT_NE(kernel_rules()[static_cast<std::size_t>(unpermute)].label.find("unpermute"), std::string::npos);
  EXPECT_EQ(classify_kernel_name("void at::native::sbtopk::gatherTopK<float, unsigned int, 2, false>(...)"),
            Category::kGating);
  EXPECT_EQ(classify_kernel_name("gate_softmax_topk_kernel"), Category::kGating);
  EXPECT_EQ(classify_kernel_name("topkGatingSoftmax<8, 64>"), Category::kGating);
}

TEST(KernelClasses, UnknownNamesAreOtherComputeAndMatchingIgnoresCase) {
  EXPECT_EQ(match_kernel_rule("void cudnn::ops::nchwToNhwcKernel<float>"), -1);
  EXPECT_EQ(classify_kernel_name("void cudnn::ops::nchwToNhwcKernel<float>"), Category::kOtherCompute);
  EXPECT_EQ(classify_kernel_name(""), Category::kOtherCompute);
  EXPECT_EQ(classify_kernel_name("NCCLDEVKERNEL_ALLREDUCE"), Category::kAllReduce);
}

// No rule of the shipped file is shadowed by an earlier one: a name made of
// exactly its substrings matches that rule first.
TEST(KernelClasses, EveryShippedRuleIsReachable) {
  const auto& rules = kernel_rules();
  ASSERT_GE(rules.size(), 10u);
  for (std::size_t i = 0; i < rules.size(); ++i) {
    std::string name;
    for (const auto& s : rules[i].all_of) name += s + "|";
    EXPECT_EQ(match_kernel_rule(name), static_cast<int>(i)) << name;
  }
}

TEST(KernelClasses, MalformedRulesNameTheProblem) {
  auto message = [](std::string_view json) {
    try {
      parse_kernel_rules(json, "rules.json");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message("{").rfind("rules.json: invalid JSON", 0), 0u);
  EXPECT_EQ(message("{}"), "rules.json: no \"rules\" array");
  EXPECT_EQ(message(R"({"rules": [{"all_of": [], "category": "gating"}]})"),
            "rules.json: rule 1: needs a non-empty \"all_of\" list of substrings");
  EXPECT_EQ(message(R"({"rules": [{"all_of": ["x"], "category": "gating"}, {"all_of": ["y"], "category": "bogus"}]})"),
            "rules.json: rule 2: unknown kernel category \"bogus\"");
  EXPECT_EQ(message(R"({"rules": [{"all_of": ["x"], "category": "memcpy"}]})"),
            "rules.json: rule 1: unknown kernel category \"memcpy\"");
  const auto ok = parse_kernel_rules(R"({"rules": [{"all_of": ["MyKernel"], "category": "expert_compute"}]})", "r");
  ASSERT_EQ(ok.size(), 1u);
  EXPECT_EQ(ok[0].all_of[0], "mykernel");  // stored lower-case
  EXPECT_EQ(ok[0].category, Category::kExpertCompute);
}

// classify_activity uses the loader's per-name cache where it is filled and
// the rules where not; copies are memcpy either way.
TEST(KernelClasses, ActivityClassificationUsesTheNameCache) {
  Trace t;
  t.strings = {"", "ncclDevKernel_SendRecv", "fused_moe_kernel"};
  Activity k;
  k.type = ActivityType::kKernel;
  k.name = StringId(1);
  Activity g = k;
  g.name = StringId(2);
  Activity c;
  c.type = ActivityType::kMemcpy;
  EXPECT_EQ(classify_activity(t, k), Category::kAllToAll);  // no cache yet
  t.activities = {k, g, c};
  t.classify_kernel_names();
  ASSERT_EQ(t.kernel_category.size(), 3u);
  EXPECT_EQ(t.kernel_category[0], -1);
  EXPECT_EQ(t.kernel_category[1], static_cast<std::int8_t>(Category::kAllToAll));
  EXPECT_EQ(t.kernel_category[2], static_cast<std::int8_t>(Category::kExpertCompute));
  EXPECT_EQ(classify_activity(t, g), Category::kExpertCompute);
  EXPECT_EQ(classify_activity(t, c), Category::kMemcpy);
}

}  // namespace
}  // namespace moetrace::analyzer
