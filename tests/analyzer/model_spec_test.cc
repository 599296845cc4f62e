// The model file of `recommend --model`: each family's config.json as its
// model repository publishes it (the fields and values below are those of
// the released configurations), Megatron-Core arguments as a launch script
// writes them, what a bad file gets, and how the shapes meet a trace.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "moetrace/analyzer/model_spec.h"
#include "moetrace/analyzer/recorded_shapes.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/schema/error.h"
#include "text_trace.h"
#include "test_paths.h"
#include "error_of.h"
#include "loaded_trace.h"

namespace moetrace::analyzer {
namespace {

struct Family {
  const char* name;
  const char* json;
  std::int64_t m, h;
  int experts, top_k, shared;
  std::int64_t shared_h;  // -1: none
  int moe_layers;
  int elem_bytes;
};

// Published config.json values (abridged to the fields that matter here,
// other fields of the real files included where they could be mistaken for
// these: intermediate_size of the dense FFN beside moe_intermediate_size).
const Family kFamilies[] = {
    {"mistralai/Mixtral-8x7B-v0.1",
     R"({"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
         "intermediate_size": 14336, "num_hidden_layers": 32, "num_local_experts": 8, "num_experts_per_tok": 2,
         "torch_dtype": "bfloat16"})",
     4096, 14336, 8, 2, -1, -1, 32, 2},
    {"deepseek-ai/DeepSeek-V3",
     R"({"model_type": "deepseek_v3", "hidden_size": 7168, "intermediate_size": 18432,
         "moe_intermediate_size": 2048, "n_routed_experts": 256, "n_shared_experts": 1,
         "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "num_hidden_layers": 61,
         "torch_dtype": "bfloat16"})",
     7168, 2048, 256, 8, 1, 2048, 58, 2},
    {"Qwen/Qwen2-57B-A14B",
     R"({"model_type": "qwen2_moe", "hidden_size": 3584, "intermediate_size": 18944, "moe_intermediate_size": 2560,
         "num_experts": 64, "num_experts_per_tok": 8, "shared_expert_intermediate_size": 20480,
         "decoder_sparse_step": 1, "mlp_only_layers": [], "num_hidden_layers": 28, "torch_dtype": "bfloat16"})",
     3584, 2560, 64, 8, 1, 20480, 28, 2},
    {"allenai/OLMoE-1B-7B-0924",
     R"({"model_type": "olmoe", "hidden_size": 2048, "intermediate_size": 1024, "num_experts": 64,
         "num_experts_per_tok": 8, "num_hidden_layers": 16})",
     2048, 1024, 64, 8, -1, -1, 16, -1},
    {"databricks/dbrx-base",
     R"({"model_type": "dbrx", "d_model": 6144, "n_layers": 40, "n_heads": 48,
         "ffn_config": {"ffn_hidden_size": 10752, "moe_num_experts": 16, "moe_top_k": 4}, "torch_dtype": "bfloat16"})",
     6144, 10752, 16, 4, -1, -1, 40, 2},
    {"openai/gpt-oss-120b (original config)",
     R"({"num_hidden_layers": 36, "num_experts": 128, "experts_per_token": 4, "hidden_size": 2880,
         "intermediate_size": 2880, "swiglu_limit": 7.0})",
     2880, 2880, 128, 4, -1, -1, 36, -1},
    {"meta-llama/Llama-4-Scout-17B-16E (text_config)",
     R"({"model_type": "llama4", "text_config": {"model_type": "llama4_text", "hidden_size": 5120,
         "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_local_experts": 16,
         "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "num_hidden_layers": 48},
         "torch_dtype": "bfloat16"})",
     5120, 8192, 16, 1, -1, -1, 48, 2},
};

TEST(ModelSpec, EachFamilysConfigJson) {
  for (const auto& f : kFamilies) {
    SCOPED_TRACE(f.name);
    const ModelSpec m = parse_model_spec(f.json, "config.json");
    ASSERT_TRUE(m.model_dim && m.expert_hidden && m.experts && m.top_k);
    EXPECT_EQ(*m.model_dim, f.m);
    EXPECT_EQ(*m.expert_hidden, f.h) << m.expert_hidden.source;
    EXPECT_EQ(*m.experts, f.experts) << m.experts.source;
    EXPECT_EQ(*m.top_k, f.top_k);
    EXPECT_EQ(m.shared_experts ? *m.shared_experts : -1, f.shared);
    EXPECT_EQ(m.shared_hidden ? *m.shared_hidden : -1, f.shared_h);
    EXPECT_EQ(m.moe_layer_count(), f.moe_layers);
    EXPECT_EQ(m.elem_bytes ? *m.elem_bytes : -1, f.elem_bytes);
    EXPECT_NE(m.experts.source.find("config.json: "), std::string::npos) << m.experts.source;
    // Every one of these families' experts is gated in its Hugging Face
    // implementation (w1/w3/w2, gate_proj/up_proj/down_proj, w1/v1/w2,
    // gate_up_proj/down_proj).
    ASSERT_TRUE(m.gated_experts);
    EXPECT_TRUE(*m.gated_experts) << m.gated_experts.source;
  }
}

// Two-matrix experts: Switch Transformers' (T5's DenseReluDense, unless
// feed_forward_proj names a gated activation) and Megatron-Core's without
// --swiglu; gated ones with --swiglu. Names as the frameworks spell them,
// in another case where a model_type may be.
TEST(ModelSpec, GatedExpertsFromTheFamilyOrTheArguments) {
  const ModelSpec sw = parse_model_spec(
      R"({"model_type": "Switch_Transformers", "d_model": 768, "d_ff": 3072, "num_experts": 8, "num_layers": 12})",
      "config.json");
  ASSERT_TRUE(sw.gated_experts && sw.expert_hidden);
  EXPECT_FALSE(*sw.gated_experts) << sw.gated_experts.source;
  EXPECT_EQ(*sw.expert_hidden, 3072);
  const ModelSpec relu = parse_model_spec(
      R"({"model_type": "switch_transformers", "d_model": 768, "d_ff": 2048, "num_experts": 16,
          "feed_forward_proj": "relu"})",
      "config.json");
  EXPECT_FALSE(*relu.gated_experts);
  EXPECT_EQ(relu.gated_experts.source, "config.json: feed_forward_proj \"relu\"");
  const ModelSpec geglu = parse_model_spec(
      R"({"model_type": "switch_transformers", "d_model": 768, "d_ff": 2048, "num_experts": 16,
          "feed_forward_proj": "gated-gelu"})",
      "config.json");
  EXPECT_TRUE(*geglu.gated_experts);
  const ModelSpec nllb = parse_model_spec(R"({"model_type": "nllb-moe", "d_model": 1024, "num_experts": 128})",
                                          "config.json");
  EXPECT_FALSE(*nllb.gated_experts);
  const ModelSpec gelu = parse_model_spec("--num-experts 8 --hidden-size 1024 --ffn-hidden-size 4096", "args.txt");
  EXPECT_FALSE(*gelu.gated_experts) << gelu.gated_experts.source;
  const ModelSpec swiglu =
      parse_model_spec("--num-experts 8 --hidden-size 1024 --ffn-hidden-size 4096 --swiglu --bf16", "args.txt");
  EXPECT_TRUE(*swiglu.gated_experts);
  EXPECT_EQ(swiglu.gated_experts.source, "args.txt: --swiglu");
}

// A gated expert of H = 1407 (odd, as DeepSeek-V2-Lite's 1408 / 2 + 3 would
// be) is modelled as a two-matrix FFN of ceil(3H / 2) = 2111: 4 M 2111 =
// 8444 M FLOPs a row against the gated expert's 6 M 1407 = 8442 M. A
// two-matrix one keeps H.
TEST(ModelSpec, AGatedExpertIsModelledWithThreeHalvesOfItsHiddenSize) {
  MoeLayerWorkload w;
  w.hidden = 1407;
  EXPECT_EQ(w.ffn_hidden(), 1407);
  w.gated = true;
  EXPECT_EQ(w.ffn_hidden(), 2111);
  w.hidden = 2048;
  EXPECT_EQ(w.ffn_hidden(), 3072);
}

TEST(ModelSpec, SourcesNameTheField) {
  const ModelSpec m = parse_model_spec(kFamilies[1].json, "v3/config.json");
  EXPECT_EQ(m.expert_hidden.source, "v3/config.json: moe_intermediate_size");  // not the dense intermediate_size
  EXPECT_EQ(m.experts.source, "v3/config.json: n_routed_experts");
  EXPECT_FALSE(m.is_moe_layer(2));  // first_k_dense_replace = 3
  EXPECT_TRUE(m.is_moe_layer(3));
  const ModelSpec dbrx = parse_model_spec(kFamilies[4].json, "config.json");
  EXPECT_EQ(dbrx.top_k.source, "config.json: ffn_config.moe_top_k");
  const ModelSpec scout = parse_model_spec(kFamilies[6].json, "config.json");
  EXPECT_EQ(scout.model_dim.source, "config.json: text_config.hidden_size");
}

// Qwen-MoE: every decoder_sparse_step-th layer counted from 1, minus the
// listed dense layers (Qwen2MoeDecoderLayer).
TEST(ModelSpec, SparseStepAndDenseLayers) {
  const ModelSpec m = parse_model_spec(
      R"({"model_type": "qwen2_moe", "hidden_size": 64, "moe_intermediate_size": 32, "num_experts": 4,
          "num_experts_per_tok": 2, "decoder_sparse_step": 2, "mlp_only_layers": [5], "num_hidden_layers": 8})",
      "c.json");
  // MoE where (l + 1) % 2 == 0: 1, 3, 5, 7; minus 5.
  EXPECT_EQ(m.moe_layer_count(), 3);
  EXPECT_TRUE(m.is_moe_layer(1));
  EXPECT_FALSE(m.is_moe_layer(5));
  EXPECT_FALSE(m.is_moe_layer(0));
}

// A launch script as Megatron-LM's MoE examples write one: variables set
// first, arguments over continued lines, a comment, --key=value forms.
TEST(ModelSpec, MegatronCoreArgumentsOfALaunchScript) {
  const char* script = R"sh(#!/bin/bash
# DeepSeek-V2-Lite-like
MODEL_ARGS=(
    --num-layers 27 \
    --hidden-size 2048 \
    --ffn-hidden-size 10944 \
    --moe-ffn-hidden-size 1408   # per expert
    --moe-layer-freq "([0]*1+[1]*26)" \
)
MOE_ARGS="--num-experts=64 --moe-router-topk 6 --moe-shared-expert-intermediate-size 2816 \
  --expert-model-parallel-size 8 --moe-token-dispatcher-type alltoall"
torchrun pretrain_gpt.py ${MODEL_ARGS[@]} $MOE_ARGS --tensor-model-parallel-size 1 \
  --pipeline-model-parallel-size 2 --bf16
)sh";
  const ModelSpec m = parse_model_spec(script, "train.sh");
  EXPECT_EQ(*m.model_dim, 2048);
  EXPECT_EQ(*m.expert_hidden, 1408);
  EXPECT_EQ(m.expert_hidden.source, "train.sh: --moe-ffn-hidden-size");
  EXPECT_EQ(*m.experts, 64);
  EXPECT_EQ(*m.top_k, 6);
  EXPECT_EQ(*m.shared_experts, 1);
  EXPECT_EQ(*m.shared_hidden, 2816);
  EXPECT_EQ(*m.num_layers, 27);
  EXPECT_EQ(m.moe_layer_count(), 26);
  EXPECT_FALSE(m.is_moe_layer(0));
  EXPECT_EQ(*m.expert_parallel, 8);
  EXPECT_EQ(*m.pipeline_parallel, 2);
  EXPECT_EQ(*m.elem_bytes, 2);
  // Without --moe-ffn-hidden-size an expert is --ffn-hidden-size wide, and
  // without --moe-router-topk k is Megatron-Core's default 2.
  const ModelSpec d = parse_model_spec("--num-experts 8 --hidden-size 1024 --ffn-hidden-size 4096 --moe-layer-freq 2 "
                                       "--num-layers 12",
                                       "args.txt");
  EXPECT_EQ(*d.expert_hidden, 4096);
  EXPECT_EQ(d.expert_hidden.source, "args.txt: --ffn-hidden-size");
  EXPECT_EQ(*d.top_k, 2);
  EXPECT_NE(d.top_k.source.find("default"), std::string::npos);
  EXPECT_EQ(d.moe_layer_count(), 6);  // l % 2 == 0
  EXPECT_EQ(*d.elem_bytes, 4);
}

std::string error_of(const std::string& text) {
  return testing::error_of<ConfigError>([&] { parse_model_spec(text, "m.json"); }, "");
}

TEST(ModelSpec, BadFilesGetOneClearLine) {
  // A dense model's config (Llama-2-7b): no routed experts.
  EXPECT_NE(error_of(R"({"model_type": "llama", "hidden_size": 4096, "intermediate_size": 11008})")
                .find("not the config.json of an MoE model"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_local_experts": 8, "num_experts_per_tok": 9})").find("only 8 routed experts"),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_local_experts": 8, "hidden_size": "4096"})").find("hidden_size is \"4096\""),
            std::string::npos);
  EXPECT_NE(error_of(R"({"num_local_experts": 8, "hidden_size": -1})").find("out of range"), std::string::npos);
  EXPECT_NE(error_of(R"({"num_local_experts": 8,)").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("--num-experts $NUM_EXPERTS --hidden-size 1024").find("expand the script's variables"),
            std::string::npos);
  EXPECT_NE(error_of("--hidden-size 1024").find("no --num-experts"), std::string::npos);
  EXPECT_NE(error_of("hidden_size: 4096").find("neither a Hugging Face config.json"), std::string::npos);
  EXPECT_THROW(read_model_spec(testing::temp_path("no_such_config.json")), ConfigError);
}

// An imported trace without expert load or layer sizes: two ranks, one MoE
// layer recognised (gate, dispatch all-to-all, experts), the forward
// dispatch of each rank sending 4096 bytes. With the model file's shapes
// (E = 4, k = 2, M = 64, bf16): 4096 B / (2 x 64 x 2 B) = 16 tokens a rank,
// routed evenly: 16 x 2 / 4 = 8 rows from each rank to each expert.
const char* kImported = R"(
run    world_size=2 backend=kineto variant=-
stream id=0 rank=0 role=compute
stream id=1 rank=1 role=compute
op id=1 rank=0 stream=0 kind=gate layer=0 iteration=0 phase=fwd start=0 end=10
op id=2 rank=0 stream=0 kind=dispatch_all_to_all layer=0 iteration=0 phase=fwd start=10 end=30 bytes=4096
op id=3 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=fwd start=30 end=80
op id=4 rank=1 stream=1 kind=gate layer=0 iteration=0 phase=fwd start=0 end=10
op id=5 rank=1 stream=1 kind=dispatch_all_to_all layer=0 iteration=0 phase=fwd start=10 end=30 bytes=4096
op id=6 rank=1 stream=1 kind=expert_ffn layer=0 iteration=0 phase=fwd start=30 end=80
)";

// The train.sh of the Megatron-Core cases: 4 experts, top-2, hidden 64,
// expert FFN 128, bf16, and `parallel` (a parallel size's flag and value,
// then a space; "" for none).
ModelSpec megatron_train_sh(const std::string& parallel = "") {
  return parse_model_spec(
      "--num-experts 4 --moe-router-topk 2 --hidden-size 64 --moe-ffn-hidden-size 128 " + parallel + "--bf16",
      "train.sh");
}

// Whether a note says `s` (anywhere in it).
bool any_note_has(const std::vector<std::string>& notes, std::string_view s) {
  return std::any_of(notes.begin(), notes.end(), [&](const std::string& n) { return n.find(s) != std::string::npos; });
}

// The MoE layers of `t` under megatron_train_sh(), with the notes on how
// their sizes were found.
struct TrainShWorkloads {
  std::vector<MoeLayerWorkload> layers;
  std::vector<std::string> notes;
};
TrainShWorkloads train_sh_workloads(const Trace& t) {
  const ModelSpec m = megatron_train_sh();
  TrainShWorkloads w;
  w.layers = moe_layer_workloads(t, &w.notes, {&m, -1});
  return w;
}

TEST(ModelSpec, ShapesFromTheModelLoadAssumedBalanced) {
  const Trace t = testing::load_text_trace("model_spec_imported.db", kImported);
  const ModelSpec m = parse_model_spec(
      R"({"num_local_experts": 4, "num_experts_per_tok": 2, "hidden_size": 64, "intermediate_size": 128,
          "torch_dtype": "bfloat16"})",
      "config.json");
  std::vector<std::string> notes;
  EXPECT_TRUE(moe_layer_workloads(t, &notes).empty());  // without the model: nothing to advise on
  notes.clear();
  const auto ws = moe_layer_workloads(t, &notes, {&m, -1});
  ASSERT_EQ(ws.size(), 1u);
  const auto& w = ws[0];
  EXPECT_EQ(w.ranks, 2);
  EXPECT_EQ(w.experts, 4);
  EXPECT_EQ(w.top_k, 2);
  EXPECT_EQ(w.model_dim, 64);
  EXPECT_EQ(w.hidden, 128);
  EXPECT_EQ(w.elem_bytes, 2);
  // An op range's bytes are what the rank sends to the other ranks (schema:
  // op_ranges.bytes), (P - 1) / P of its rows under balanced routing: 4096 B
  // = 1/2 x tokens x k 2 x M 64 x 2 B gives 32 tokens, 32 x 2 / 4 = 16 rows
  // to each expert.
  for (int s = 0; s < 2; ++s)
    for (int e = 0; e < 4; ++e) EXPECT_EQ(w.routing.count(s, e), 16) << s << " " << e;
  EXPECT_TRUE(any_note_has(notes, "routing assumed balanced, 32 tokens a rank"));
  // --tokens overrides the bytes.
  const auto ws2 = moe_layer_workloads(t, nullptr, {&m, 40});
  ASSERT_EQ(ws2.size(), 1u);
  EXPECT_EQ(ws2[0].routing.count(0, 0), 20);  // 40 x 2 / 4
  // The recommenders run on it.
  RecommendOptions o;
  o.model = &m;
  o.simulate = false;
  const auto rec = recommend(t, o);
  ASSERT_EQ(rec.layers.size(), 1u);
  EXPECT_TRUE(rec.layers[0].pipeline.computed);
}

// The expert-parallel group is the group size the trace's all-to-alls
// record (Kineto's "Group size"), not the world: a world of 2 whose
// all-to-alls run in groups of 2 here agrees with EP 2, and a model file
// saying EP 4 is a conflict named with both sources.
TEST(ModelSpec, ExpertParallelGroupFromTheAllToAlls) {
  const Trace t = testing::load_text_trace("model_spec_ep.db",
                                           std::string(kImported) +
                                               "collective rank=0 start=10 end=30 name=all_to_all group_size=2\n"
                                               "collective rank=1 start=10 end=30 name=all_to_all group_size=2\n");
  const ModelSpec m = megatron_train_sh("--expert-model-parallel-size 4 ");
  EXPECT_EQ(testing::error_of<ConfigError>([&] { moe_layer_workloads(t, nullptr, {&m, -1}); }),
            "the expert-parallel group is 2 in the trace (its all-to-alls' group size) but 4 in train.sh: "
            "--expert-model-parallel-size");
  const auto ws = train_sh_workloads(t);
  ASSERT_EQ(ws.layers.size(), 1u);
  EXPECT_EQ(ws.layers[0].ranks, 2);
  EXPECT_NE(ws.notes.front().find("expert-parallel group of 2 ranks (the group size the trace's all-to-alls record)"),
            std::string::npos)
      << ws.notes.front();
}

// Parallel sizes from the process groups the collectives record, by the
// groups' descriptions as Megatron-Core (group_desc) and a DeviceMesh
// ("mesh_tp") name them, in another case than theirs: TP 2 and PP 2 are
// printed with their groups, EP comes from the expert group where the
// all-to-alls record no group size, combined groups (expert-data) count for
// no dimension, and a model file's other TP is a conflict naming both.
TEST(ModelSpec, ParallelSizesFromTheProcessGroups) {
  const Trace t = testing::load_text_trace(
      "model_spec_groups.db", std::string(kImported) +
                "collective rank=0 start=10 end=30 name=all_to_allv process_group=3(expert_model_parallel_group) "
                "group_ranks=[0,1]\n"
                "collective rank=0 start=40 end=50 name=allreduce process_group=mesh_tp group_ranks=[0,2]\n"
                "collective rank=0 start=60 end=70 name=coalesced process_group=Pipeline_Model_Parallel_Group "
                "group_ranks=[0,4]\n"
                "collective rank=0 start=80 end=90 name=allreduce process_group=EXPERT_DATA_PARALLEL_GROUP "
                "group_ranks=[0,8,16,24]\n");
  const auto ws = train_sh_workloads(t);
  ASSERT_EQ(ws.layers.size(), 1u);
  EXPECT_EQ(ws.layers[0].ranks, 2);
  const auto noted = [&](std::string_view s) { return any_note_has(ws.notes, s); };
  EXPECT_TRUE(noted("EP 2 (\"3(expert_model_parallel_group)\")")) << ws.notes.front();
  EXPECT_TRUE(noted("TP 2 (\"mesh_tp\")"));
  EXPECT_TRUE(noted("PP 2 (\"Pipeline_Model_Parallel_Group\")"));
  EXPECT_FALSE(noted("DP"));
  EXPECT_TRUE(noted("expert-parallel group of 2 ranks (the trace's process group"));
  const ModelSpec tp4 = megatron_train_sh("--tensor-model-parallel-size 4 ");
  EXPECT_EQ(testing::error_of<ConfigError>([&] { moe_layer_workloads(t, nullptr, {&tp4, -1}); }),
            "the tensor-parallel size is 2 in the trace (its process group \"mesh_tp\") but 4 in train.sh: "
            "--tensor-model-parallel-size");
}

// The GEMM of each framework op's recorded input dims (PyTorch's ATen
// signatures): mm(a[T,K], b[K,N]), addmm(bias, a, b), linear(x, W[N,K]),
// bmm and baddbmm over a batch, _grouped_mm(a[T,K], b[E,K,N]); other ops,
// mismatched sizes and text that is no JSON read as nothing.
TEST(RecordedShapes, GemmOfEachOp) {
  using S = GemmShape;
  EXPECT_EQ(gemm_shape("aten::mm", "[[512,64],[64,256]]"), (S{64, 256, 512}));
  EXPECT_EQ(gemm_shape("aten::addmm", "[[256],[512,64],[64,256],[],[]]"), (S{64, 256, 512}));
  EXPECT_EQ(gemm_shape("aten::linear", "[[4,128,64],[256,64],[256]]"), (S{64, 256, 512}));
  EXPECT_EQ(gemm_shape("ATEN::BMM", "[[8,512,64],[8,64,256]]"), (S{64, 256, 4096}));
  EXPECT_EQ(gemm_shape("aten::baddbmm", "[[8,512,256],[8,512,64],[8,64,256]]"), (S{64, 256, 4096}));
  EXPECT_EQ(gemm_shape("aten::_grouped_mm", "[[512,64],[8,64,256],[8]]"), (S{64, 256, 512}));
  EXPECT_EQ(gemm_shape("aten::add", "[[512,64],[64,256]]"), std::nullopt);
  EXPECT_EQ(gemm_shape("aten::mm", "[[512,64],[32,256]]"), std::nullopt);
  EXPECT_EQ(gemm_shape("aten::linear", "[[512,64],[256,32]]"), std::nullopt);
  EXPECT_EQ(gemm_shape("aten::mm", "[[512,64]"), std::nullopt);
  EXPECT_EQ(gemm_shape("aten::mm", "[[512,-1],[-1,256]]"), std::nullopt);
}

// A layer without a router range (HF Mixtral's router is a plain nn.Linear):
// per expert w1 and w3 map M = 64 to H = 256 and w2 maps back, as
// aten::linear with weights [N, K], in float32. By hand: M is the input of
// the first expert GEMM (64), H the input of the GEMMs that map to M (256),
// 4 bytes an element; no router, so neither E nor k nor the tokens. A
// backward GEMM (transposed shapes) is not read.
TEST(RecordedShapes, ExpertsWithoutARouter) {
  const auto path = testing::temp_path("recorded_shapes.db");
  std::string text = R"(
stream id=0 rank=0 role=compute
)";
  const char* w[] = {"[[96,64],[256,64]]", "[[96,64],[256,64]]", "[[96,256],[64,256]]"};
  int corr = 1;
  for (int e = 0; e < 2; ++e)
    for (int g = 0; g < 3; ++g, ++corr) {
      const int t = 10 * corr;
      text += fmt::format("nvtx rank=0 thread=1 start={} end={} domain=pytorch name=aten::linear dims={} "
                          "types=[\"float\",\"float\"]\n",
                          t, t + 5, w[g]);
      text += fmt::format("api rank=0 thread=1 start={} end={} name=cudaLaunchKernel corr={}\n", t + 1, t + 2, corr);
      text += fmt::format("op id={} rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=fwd start={} end={}\n",
                          corr, 1000 + t, 1005 + t);
      text += fmt::format("kernel rank=0 stream=0 start={} end={} name=gemm corr={} op={}\n", 1000 + t, 1005 + t,
                          corr, corr);
    }
  text += "nvtx rank=0 thread=1 start=500 end=505 domain=pytorch name=aten::mm dims=[[256,96],[96,64]]\n"
          "api rank=0 thread=1 start=501 end=502 name=cudaLaunchKernel corr=99\n"
          "op id=99 rank=0 stream=0 kind=expert_ffn layer=0 iteration=0 phase=bwd start=2000 end=2005\n"
          "kernel rank=0 stream=0 start=2000 end=2005 name=gemm corr=99 op=99\n";
  testing::write_text_trace(path, text);
  const Trace t = load_trace(path);
  ASSERT_EQ(t.input_shapes.size(), 7u);
  const auto s = recorded_layer_shape(t, 0);
  EXPECT_EQ(s.gemms, 6);
  EXPECT_EQ(s.model_dim, 64);
  EXPECT_EQ(s.hidden, 256);
  EXPECT_EQ(s.elem_bytes, 4);
  EXPECT_EQ(s.experts, std::nullopt);
  EXPECT_EQ(s.top_k, std::nullopt);
  EXPECT_EQ(s.tokens, std::nullopt);
  // Gated: w1 and w3 write 2 x 96 rows x 256 an expert, w2 reads 96 rows x
  // H = 256: twice.
  EXPECT_EQ(s.gated, true);
  EXPECT_EQ(recorded_layer_shape(t, 1).gemms, 0);
}

// DeepSeek-V3's gate (its group-limited routing) as the profiler records
// it: the router GEMM outside the gate, then torch.topk on the [T, G, E/G]
// group scores (3-D: not read), on the [T, G] group sums (G = 8 groups)
// and on the [T, E] scores (E = 256). By hand: E is the widest scores
// picked from, 256; T = 32 rows; four experts of w1 [128, 64] and w2
// [64, 128] on 64 rows each: M = 64, H = 128, k = 4 x 64 rows of the down
// projections / 32 tokens = 8.
// A text trace of one rank whose forward ops of layer 0 are each one
// framework range with recorded shapes, its launch and its kernel.
struct ShapedRanges {
  std::string types;   // the ranges' recorded element types
  std::string launch;  // the launching call's name
  std::string text = "stream id=0 rank=0 role=compute\n";
  int corr = 1;
  void add(const char* name, const std::string& dims, const char* kind, const char* kernel) {
    const int t = 10 * corr;
    text += fmt::format("nvtx rank=0 thread=1 start={} end={} domain=pytorch name={} dims={} types={}\n", t, t + 5,
                        name, dims, types);
    text += fmt::format("api rank=0 thread=1 start={} end={} name={} corr={}\n", t + 1, t + 2, launch, corr);
    text += fmt::format("op id={} rank=0 stream=0 kind={} layer=0 iteration=0 phase=fwd start={} end={}\n", corr,
                        kind, 1000 + t, 1005 + t);
    text += fmt::format("kernel rank=0 stream=0 start={} end={} name={} corr={} op={}\n", 1000 + t, 1005 + t,
                        kernel, corr, corr);
    ++corr;
  }
};

TEST(RecordedShapes, ExpertsAndTokensFromTheTopKWhereNoRouterGemmIsInTheGate) {
  const auto path = testing::temp_path("recorded_topk.db");
  ShapedRanges r{R"(["c10::BFloat16","Scalar"])", "cudaLaunchKernel"};
  auto range = [&](const char* name, const std::string& dims, const char* kind, const char* kernel) {
    r.add(name, dims, kind, kernel);
  };
  range("aten::topk", "[[32,8,32],[],[],[],[]]", "gate", "gatherTopK");
  range("aten::topk", "[[32,8],[],[],[],[]]", "gate", "gatherTopK");
  range("aten::topk", "[[32,256],[],[],[],[]]", "gate", "gatherTopK");
  for (int e = 0; e < 4; ++e) {
    range("aten::linear", "[[64,64],[128,64]]", "expert_ffn", "nvjet_tst_128x64");
    range("aten::linear", "[[64,128],[64,128]]", "expert_ffn", "nvjet_tst_64x128");
  }
  testing::write_text_trace(path, r.text);
  const auto s = recorded_layer_shape(load_trace(path), 0);
  EXPECT_EQ(s.experts, 256);
  EXPECT_EQ(s.tokens, 32);
  EXPECT_EQ(s.top_k, 8);
  EXPECT_EQ(s.model_dim, 64);
  EXPECT_EQ(s.hidden, 128);
  EXPECT_EQ(s.gated, false);  // w1 writes 64 rows x 128 an expert, w2 reads 64 x H = 128: once
  EXPECT_EQ(s.gemms, 8);
  EXPECT_NE(s.source.find("2 top-k"), std::string::npos) << s.source;  // the 3-D one not read
}

// GPT-OSS's and Llama 4's experts as batched GEMMs: one gate_up_proj of
// [E, rows, M] x [E, M, 2H] and one down_proj of [E, rows, H] x [E, H, M],
// with H = M (GPT-OSS: 2880 both), so that the down projection and a
// separate gate or up GEMM would look alike. By hand: the router maps M =
// 64 to E = 4 over 32 tokens; the GEMMs to M are the down projections, 4 x
// 16 = 64 rows from H = 64; the up side writes 64 rows x 128 = 2 x 64 x H:
// gated; k = 64 / 32 = 2.
TEST(RecordedShapes, AFusedGateUpProjectionWhereHEqualsM) {
  const auto path = testing::temp_path("recorded_gate_up.db");
  ShapedRanges r{R"(["c10::BFloat16","c10::BFloat16"])", "hipLaunchKernel"};
  r.add("aten::linear", "[[32,64],[4,64]]", "gate", "Cijk_Alik_Bljk_BBS_BH");
  r.add("aten::BMM", "[[4,16,64],[4,64,128]]", "expert_ffn", "Cijk_Alik_Bljk_BBS_BH");
  r.add("aten::BMM", "[[4,16,64],[4,64,64]]", "expert_ffn", "Cijk_Alik_Bljk_BBS_BH");
  testing::write_text_trace(path, r.text);
  const auto s = recorded_layer_shape(load_trace(path), 0);
  EXPECT_EQ(s.model_dim, 64);
  EXPECT_EQ(s.experts, 4);
  EXPECT_EQ(s.hidden, 64);
  EXPECT_EQ(s.top_k, 2);
  EXPECT_EQ(s.gated, true);
}

// How the local experts ran, from the kernels of a forward pass of the
// layer (MoeLayerWorkload::fused_experts). Kernel names as the frameworks'
// GEMM back ends give them, in another case than theirs. Per rank 4 local
// experts (E = 8 on P = 2), 64 tokens x k = 2 = 128 rows: every expert can
// have rows. By hand:
// - Megatron-Core's SequentialMLP, a loop over the 4 experts, each fc1, an
//   activation and fc2: 12 kernels a pass, not fewer than the 4 experts
//   with rows: not fused;
// - Megatron-Core's GroupedMLP (grouped_gemm's CUTLASS kernels), fc1, the
//   activation, fc2: 3 kernels for 4 experts: fused;
// - the same grouped run in two micro-batches of the iteration, 32 tokens
//   each: 3 kernels a pass against 4 experts: fused;
// - a Hugging Face loop that skips experts without rows, with 1 token a
//   rank (k = 2 rows, so at most 2 experts with rows), each used expert's
//   w1, w3, activation, w2: 8 kernels against 2: not fused;
// - moetrace's own run says so in its run config, whatever its kernels.
TEST(ModelSpec, FusedExpertsFromTheKernelsOfAForwardPass) {
  const ModelSpec m = parse_model_spec(
      R"({"num_local_experts": 8, "num_experts_per_tok": 2, "hidden_size": 64, "intermediate_size": 128})",
      "config.json");
  struct Case {
    const char* what;
    std::vector<std::string> kernels;  // of one forward pass of the experts
    int micro_batches;
    std::int64_t tokens;
    const char* run;
    bool fused, noted;
  };
  const std::vector<std::string> loop = {"SM90_XMMA_GEMM_BF16BF16_BF16F32_F32_TN_N", "Vectorized_Elementwise_Kernel",
                                         "sm90_xmma_gemm_bf16bf16_bf16f32_f32_nn_n"};
  std::vector<std::string> sequential;
  for (int e = 0; e < 4; ++e) sequential.insert(sequential.end(), loop.begin(), loop.end());
  const std::vector<std::string> grouped = {"Cutlass::Kernel<GemmUniversal<GroupedGemm_fc1>>", "GLU_kernel",
                                            "Cutlass::Kernel<GemmUniversal<GroupedGemm_fc2>>"};
  std::vector<std::string> hf;
  for (int e = 0; e < 2; ++e)
    for (const char* k : {"NVJET_TST_64X8_64X16", "nvjet_tst_64x8_64x16", "SiLU_Kernel", "nvjet_tst_8x64_64x16"})
      hf.emplace_back(k);
  const Case cases[] = {
      {"SequentialMLP", sequential, 1, 64, "run world_size=2 backend=kineto", false, false},
      {"GroupedMLP", grouped, 1, 64, "run world_size=2 backend=kineto", true, true},
      {"GroupedMLP, two micro-batches", grouped, 2, 64, "run world_size=2 backend=kineto", true, true},
      {"a loop over the experts with rows", hf, 1, 1, "run world_size=2 backend=kineto", false, false},
      {"moetrace's own fused run", sequential, 1, 64, "run world_size=2 variant=pipemoe\nconfig pipemoe.fused_experts=true",
       true, false},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.what);
    std::string text = std::string(c.run) + "\nstream id=0 rank=0 role=compute\nstream id=1 rank=1 role=compute\n";
    int id = 1;
    for (int r = 0; r < 2; ++r)
      for (int mb = 0; mb < c.micro_batches; ++mb) {
        std::int64_t t = 1000 * (mb + 1);
        text += fmt::format("op id={} rank={} stream={} kind=expert_ffn layer=0 iteration=0 micro_batch={} "
                            "phase=fwd start={} end={}\n",
                            id, r, r, mb, t, t + 900);
        for (const auto& k : c.kernels) {
          text += fmt::format("kernel rank={} stream={} start={} end={} name={} op={}\n", r, r, t, t + 10, k, id);
          t += 20;
        }
        ++id;
      }
    const Trace t = testing::load_text_trace("fused_experts.db", text);
    std::vector<std::string> notes;
    const auto ws = moe_layer_workloads(t, &notes, {&m, c.tokens});
    ASSERT_EQ(ws.size(), 1u);
    EXPECT_EQ(ws[0].fused_experts, c.fused);
    EXPECT_EQ(any_note_has(notes, "the experts run fused"), c.noted) << ::testing::PrintToString(notes);
  }
}

// An overlapped schedule: on each rank the layer's backward (of another
// micro-batch) runs while its forward does. By hand, per rank: forward window
// [0,80], backward [40,120]: union 120 of a sum 160 = 75 %, below 95 %: the
// recommendations say they assume a non-overlapped schedule. The same trace
// with the backward after the forward ([80,160]: union = sum) says nothing.
TEST(ModelSpec, OverlappedScheduleIsSaid) {
  const ModelSpec m = parse_model_spec(
      R"({"num_local_experts": 4, "num_experts_per_tok": 2, "hidden_size": 64, "intermediate_size": 128})", "config.json");
  for (const int bwd : {40, 80}) {
    const auto path = testing::temp_path("model_spec_overlap.db");
    std::string text = kImported;
    for (int r = 0; r < 2; ++r)
      text += fmt::format("op id={} rank={} stream={} kind=expert_ffn layer=0 iteration=0 phase=bwd start={} end={}\n",
                          10 + r, r, r, bwd, bwd + 80);
    testing::write_text_trace(path, text);
    const Trace t = load_trace(path);
    RecommendOptions o;
    o.model = &m;
    o.tokens_per_rank = 64;
    o.simulate = false;
    const auto rec = recommend(t, o);
    ASSERT_EQ(rec.layers.size(), 1u);
    const bool said = std::any_of(rec.notes.begin(), rec.notes.end(), [](const std::string& n) {
      return n.rfind("layer 0: its forward and backward run side by side", 0) == 0 &&
             n.find("75 % of their sum") != std::string::npos && n.find("assumes a non-overlapped schedule") != std::string::npos;
    });
    EXPECT_EQ(said, bwd == 40) << bwd;
  }
}

TEST(ModelSpec, TraceAndModelThatDisagreeNameBothSources) {
  const Trace t = testing::load_text_trace(
      "model_spec_conflict.db", std::string(kImported) + "layer layer=0 experts=4 top_k=2 model_dim=32 hidden_dim=128\n");
  const ModelSpec m = parse_model_spec(R"({"num_local_experts": 4, "num_experts_per_tok": 2, "hidden_size": 64,
                                            "intermediate_size": 128})",
                                       "config.json");
  const std::string what = testing::error_of<ConfigError>([&] { moe_layer_workloads(t, nullptr, {&m, -1}); });
  EXPECT_NE(what.find("32 in the trace (its layers table)"), std::string::npos) << what;
  EXPECT_NE(what.find("64 in config.json: hidden_size"), std::string::npos) << what;
}

}  // namespace
}  // namespace moetrace::analyzer
