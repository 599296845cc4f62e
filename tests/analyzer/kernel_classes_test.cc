// Kernel classification by name (analyzer/data/kernel_classes.json).
#include "moetrace/analyzer/kernel_classes.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>
#include <vector>

#include "moetrace/analyzer/breakdown.h"
#include "moetrace/schema/ascii.h"
#include "moetrace/schema/error.h"
#include "error_of.h"

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

// A rule's word matches only where it stands in the name as one run: a name
// holding each pair of adjacent letters of "nccl" and of "alltoall" ("nc",
// "cc", "cl"; "al", "ll", "lt", ...) apart, but neither word, matches
// nothing; the words at either end of a name do match.
TEST(KernelClasses, WordsMatchAsRunsNotAsTheirLetterPairs) {
  EXPECT_EQ(match_kernel_rule("void ncc_ccl_allt_ltoa_toal_kernel<float>(float*)"), -1);
  EXPECT_EQ(classify_kernel_name("nccl_X_alltoall"), Category::kAllToAll);
  EXPECT_EQ(classify_kernel_name("alltoall_nccl"), Category::kAllToAll);
  EXPECT_EQ(classify_kernel_name("xnccl"), Category::kOtherComm);
  // One letter short at either end.
  EXPECT_EQ(match_kernel_rule("ncc"), -1);
  EXPECT_EQ(match_kernel_rule("ccl"), -1);
}

// Names are compared as ASCII bytes whatever the locale: A-Z lowered, other
// bytes (UTF-8 of a non-ASCII letter included) kept by to_ascii_lower and
// dropped from a comparable word.
TEST(KernelClasses, NamesLoweredAsAsciiBytes) {
  EXPECT_EQ(to_ascii_lower("NCCL_AllToAll_Z \xC3\x84x"), "nccl_alltoall_z \xC3\x84x");
  EXPECT_EQ(comparable_word("All2All-Dispatch\xC3\x84<T>"), "all2alldispatcht");
  EXPECT_TRUE(ascii_alnum('7') && ascii_alnum('q') && ascii_alnum('Q'));
  EXPECT_FALSE(ascii_alnum('_') || ascii_alnum('\xC3') || ascii_alnum('@') || ascii_alnum('['));
}

// No rule of the shipped file is shadowed by an earlier one: a name made of
// exactly its substrings matches that rule first.
TEST(KernelClasses, EveryShippedRuleIsReachable) {
  const auto& rules = kernel_rules();
  ASSERT_GE(rules.size(), 10u);
  for (std::size_t i = 0; i < rules.size(); ++i) {
    const auto& r = rules[i];
    // void <scope>::<function words>_<...><all_of substrings>(int)
    std::string name = "void ";
    if (!r.scope_any.empty()) name += r.scope_any.front() + "::";
    for (const auto& w : r.function) name += w + "_";
    name += "k<";
    for (const auto& s : r.all_of) name += s + "|";
    name += ">(int)";
    if (r.function_exact) {
      name = "void ";
      for (const auto& w : r.function) name += w;
      name += "<1>(int)";
    }
    EXPECT_EQ(match_kernel_rule(name), static_cast<int>(i)) << name;
  }
}

// Kernel names as tools record them, split into the words rules compare.
TEST(KernelClasses, NameWordsDropReturnTypeTemplateArgumentsAndParameters) {
  using W = std::vector<std::vector<std::string>>;
  EXPECT_EQ(kernel_name_words("void acme::internode_ll::dispatch<true, 7>(int4*, acme::internode_ll::Meta*)"),
            (W{{"acme"}, {"internode", "ll"}, {"dispatch"}}));
  EXPECT_EQ(kernel_name_words("void Fork::V2::moeA2ADispatchKernel<Policy<(Mode)1>, 8, true>(Params)"),
            (W{{"fork"}, {"v2"}, {"moe", "a2a", "dispatch", "kernel"}}));
  EXPECT_EQ(kernel_name_words("void (anonymous namespace)::dispatchKernel<16u, true, false>(int*)"),
            (W{{"dispatch", "kernel"}}));
  EXPECT_EQ(kernel_name_words("ncclDevKernel_SendRecv(ncclDevKernelArgs4K const)"),
            (W{{"nccl", "dev", "kernel", "send", "recv"}}));
  EXPECT_EQ(kernel_name_words("_ZN7my_fork9internode8dispatchILb0ELi4EEEvP4int4"),
            (W{{"my", "fork"}, {"internode"}, {"dispatch"}}));
  EXPECT_EQ(kernel_name_words("kernel_dispatch_token_intra_node"), (W{{"kernel", "dispatch", "token", "intra", "node"}}));
  EXPECT_EQ(kernel_name_words(""), W{});
  EXPECT_EQ(kernel_name_words("void f<(>(x"), (W{{"f"}}));  // unbalanced: no crash, what stands before
}

// Expert-parallel communication libraries are vendored and forked under other
// namespaces; their kernels are known by their own names. Every name here is
// one the library's public source defines (rule sources in
// kernel_classes.json), its function under namespaces of forks (acme_moe,
// fork2, zeta, ...). Those namespaces keep a word of the library's own
// (ep, internode, intranode, moe), which the rules' scope_any lists: the
// rule needs one of them beside the function's name, so these cases test
// the function and that word, not a namespace that no rule names.
TEST(KernelClasses, EpKernelsAreKnownUnderAnyNamespace) {
  struct Case {
    const char* name;
    Category category;
    std::optional<OpKind> kind;
  };
  const auto d = OpKind::kDispatchAllToAll, c = OpKind::kCombineAllToAll;
  const Case cases[] = {
      // DeepEP (intranode, internode, low-latency, legacy, elastic) in forks.
      {"void acme_moe::ep::intranode::notify_dispatch<8>(int const*, int*, int, int const*, int*, int, int, int)",
       Category::kAllToAll, d},
      {"void nova::legacy::Intranode::cached_notify_dispatch<8>(int const*, int, void**, int**, int)", Category::kAllToAll, d},
      {"void fork2::internode::dispatch<false, 4, false, 7, 4>(int4*, float*, long*, float*, fork2::internode::SourceMeta*)",
       Category::kAllToAll, d},
      {"void zeta::internode::cached_notify<false>(int, int, int, int, int, int*, int*, int*, int, void*)",
       Category::kAllToAll, c},
      {"void nova::legacy::intranode::cached_notify_combine<8>(void**, int*, int, int, int, int**, int, int)",
       Category::kAllToAll, c},
      {"void xen_moe::internode_ll::combine<false, 7168, 9, 4>(void*, int*, int)", Category::kAllToAll, c},
      {"void UcclLike::Internode_LL::dispatch<true, false, 7168>(void*, float*, int*, long*)", Category::kAllToAll, d},
      {"void q9::ep::elastic::dispatch_impl<1, 2>(void*)", Category::kAllToAll, d},
      {"void mori::moe::deepep::internode_ll::clean_low_latency_buffer<256>(int*, int, int*, int)", Category::kAllToAll,
       std::nullopt},
      {"void acme::internode::ibgda_initialize_recv_queue(int)", Category::kAllToAll, std::nullopt},
      {"_ZN7my_fork9internode8dispatchILb0ELi4ELb0ELi7ELi4EEEvP4int4Pf", Category::kAllToAll, d},
      {"void acme::layout::get_dispatch_layout<256, 32, 8>(long const*, int*, int*, int*, bool*, int, int, int, int)",
       Category::kOtherCompute, OpKind::kPermute},
      // pplx-kernels, in its anonymous namespace and in another one.
      {"void (anonymous namespace)::dispatchKernel<16u, true, false>(int*, unsigned long)", Category::kAllToAll, d},
      {"void myco::combineKernel<__nv_bfloat16, __nv_bfloat16, 10ul, true, true>(int*)", Category::kAllToAll, c},
      // TensorRT-LLM / FlashInfer MoE all-to-all, vendored.
      {"void vendored::_v1::kernels::moe_comm::moeA2ADispatchKernel<PolicyA, 8, true>(Params)", Category::kAllToAll, d},
      {"void vendored::kernels::moe_comm::moeA2ACombineKernel<float, PolicyB, 8>(Params)", Category::kAllToAll, c},
      {"void Vendored::MoeA2ASanitizeExpertIdsKernel(int*, int)", Category::kAllToAll, std::nullopt},
      {"void vendored::kernels::moeAllToAllKernel<4, false>(MoeEpWorldInfo, MoeCommWorkspace)", Category::kAllToAll,
       std::nullopt},
      // NVSHMEM and IBGDA.
      {"void alltoall_on_stream_kernel<float>(int, float*, float const*, unsigned long)", Category::kAllToAll, std::nullopt},
      {"void barrier_on_stream_kernel_threadgroup<(threadgroup_t)1>(int, int)", Category::kOtherComm, std::nullopt},
      {"nvshmemi_proxy_rma_entrypoint", Category::kAllToAll, std::nullopt},
      // Triton-generated all-to-all (a Triton kernel is named after its function).
      {"kernel_dispatch_token_intra_node", Category::kAllToAll, d},
      {"kernel_combine_token", Category::kAllToAll, c},
      {"all_to_all_kernel", Category::kAllToAll, std::nullopt},
      {"void c10d::nvshmem_extension::allToAllV(void*, void*, long*, long*, int, int)", Category::kAllToAll, std::nullopt},
  };
  for (const auto& k : cases) {
    const int i = match_kernel_rule(k.name);
    ASSERT_GE(i, 0) << k.name;
    const auto& r = kernel_rules()[static_cast<std::size_t>(i)];
    EXPECT_EQ(r.category, k.category) << k.name << " -> " << r.display_name();
    EXPECT_EQ(r.kind, k.kind) << k.name << " -> " << r.display_name();
  }
}

// What only looks like it: a split-KV attention combine, a dispatch helper
// outside any EP library, and EP names inside another kernel's template
// arguments or parameters.
TEST(KernelClasses, EpWordsOutsideAnEpKernelNameDoNotCount) {
  for (const char* name : {
           "void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>, 4, 3, false>(Flash_fwd_params)",
           "void flash::FlashAttnFwdCombine<cute::tuple<int>, 8, 256>(Params)",
           "void at::native::(anonymous namespace)::dispatch_helper<float>(float*)",
           "void cutlass::device_kernel<acme::internode::dispatch_policy<8>>(acme::internode::combine_args)",
           "void at::native::vectorized_elementwise_kernel<4, at::native::AlltoallFunctor<float>>(int, float*)",
       })
    EXPECT_EQ(classify_kernel_name(name), Category::kOtherCompute) << name;
}

TEST(KernelClasses, MalformedRulesNameTheProblem) {
  auto message = [](std::string_view json) {
    return testing::error_of([&] { parse_kernel_rules(json, "rules.json"); });
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
