// Plan structure per variant: op counts derived by hand, stream orders from
// the papers (pipemoe Eq. 9-11, mpipemoe Fig. 7a, ppmoe 1F1B, pro-prophet
// Alg. 2), mpipemoe Table II Q vectors and Eq. 5 memory saving, the
// pro-prophet planner on a hand-worked example, and the checker catching
// broken plans.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <string_view>

#include "moetrace/plan/builders.h"
#include "moetrace/plan/cpu_executor.h"
#include "moetrace/plan/validate.h"
#include "moetrace/schema/error.h"

namespace moetrace::plan {
namespace structure_test {  // named, not anonymous: unity builds join this file with others

ModelShape shape(int layers, int experts, int top_k, std::int64_t m = 4, std::int64_t h = 16) {
  return {.num_layers = layers, .num_experts = experts, .top_k = top_k, .model_dim = m, .expert_hidden = h};
}

CommonConfig common(const ModelShape& s, int ranks, int iterations) {
  return {.model = s, .ranks = ranks, .iterations = iterations};
}

ExpertLoad balanced(int iterations, int layers, int sources, int experts, int top_k, std::int64_t tokens) {
  SyntheticLoadConfig c{.iterations = iterations, .layers = layers, .sources = sources, .experts = experts,
                        .top_k = top_k, .tokens_per_source = tokens};
  return synthetic_load(c);
}

std::map<OpKind, int> count_by_kind(const Plan& p) {
  std::map<OpKind, int> n;
  for (const Op& op : p.ops) ++n[op.kind];
  return n;
}

// Names of the ops of `rank` on its stream named `stream` whose name matches `re`.
std::vector<std::string> stream_ops(const Plan& p, int rank, const std::string& stream, const std::string& re) {
  std::vector<std::string> out;
  const std::regex pattern(re);
  for (const Op& op : p.ops)
    if (op.rank.value == rank && p.stream(op.stream).name == "rank" + std::to_string(rank) + "." + stream &&
        std::regex_search(op.name, pattern))
      out.push_back(op.name);
  return out;
}

// The chunked all-to-alls (dispatch and combine) of layer 0, iteration 0 on
// the comm stream of `rank`, in stream order.
std::vector<std::string> chunk_all_to_alls(const Plan& p, int rank) {
  return stream_ops(p, rank, "comm", "^L0.it0.(dispatch|combine).*c[0-9]$");
}

// Full names of layer 0, iteration 0's chunk all-to-alls, written as the
// papers write them: "D2" is chunk 2's dispatch
// (L0.it0.dispatch_all_to_all.c2), "C0" chunk 0's combine.
std::vector<std::string> layer0_chunk_names(std::initializer_list<std::string_view> short_names) {
  std::vector<std::string> names;
  for (const auto n : short_names)
    names.push_back(std::string("L0.it0.") + (n[0] == 'D' ? "dispatch" : "combine") + "_all_to_all.c" +
                    std::string(n.substr(1)));
  return names;
}

void expect_valid(const Plan& p) {
  const auto problems = check_plan(p);
  EXPECT_TRUE(problems.empty()) << problems.front();
}

TEST(Structure, DpMoeOpCounts) {
  DpMoeConfig c;
  c.common = common(shape(2, 8, 2), 4, 1);
  const Plan p = build_dpmoe(c, balanced(1, 2, 4, 8, 2, 16));
  expect_valid(p);
  auto n = count_by_kind(p);
  // Per layer and pass: one gate, permute, unpermute per rank; one dispatch
  // and one combine all-to-all op per rank; one expert_ffn per expert.
  EXPECT_EQ(n[OpKind::kGate], 2 * 2 * 4);
  EXPECT_EQ(n[OpKind::kPermute], 2 * 2 * 4);
  EXPECT_EQ(n[OpKind::kUnpermute], 2 * 2 * 4);
  EXPECT_EQ(n[OpKind::kDispatchAllToAll], 2 * 2 * 4);
  EXPECT_EQ(n[OpKind::kCombineAllToAll], 2 * 2 * 4);
  EXPECT_EQ(n[OpKind::kExpertFfn], 2 * 2 * 8);
  EXPECT_EQ(n[OpKind::kGradAllReduce], 2 * 4);  // the gate, per layer and rank
  EXPECT_EQ(n[OpKind::kOptimizer], 4 * 2 * (1 + 2));  // gate + 2 experts per rank and layer
  // Every collective has one op on each rank of its group.
  std::map<std::int64_t, std::set<int>> members;
  for (const Op& op : p.ops)
    if (const Collective* col = op.collective()) members[col->id.value].insert(op.rank.value);
  for (const auto& [id, ranks] : members) EXPECT_EQ(ranks.size(), 4u) << id;
  // Uneven all-to-all-v: a rank's send to a peer is exactly the rows it routes there.
  const Op& d = *std::find_if(p.ops.begin(), p.ops.end(), [](const Op& op) {
    return op.kind == OpKind::kDispatchAllToAll && op.rank.value == 1;
  });
  for (const auto& s : d.collective()->sends) EXPECT_EQ(s.view.rows, 2 * 4) << "to rank " << s.peer.value;
}

TEST(Structure, PipeMoeDispatchesThenCombines) {
  PipeMoeConfig c;
  c.common = common(shape(1, 4, 1), 4, 1);
  c.pipeline_degree = 3;
  const Plan p = build_pipemoe(c, balanced(1, 1, 4, 4, 1, 30));
  expect_valid(p);
  // pipemoe Eq. 9-11 on one network resource: D1 D2 D3, then C1 C2 C3.
  EXPECT_EQ(chunk_all_to_alls(p, 0), layer0_chunk_names({"D0", "D1", "D2", "C0", "C1", "C2"}));
  // pipemoe Eq. 5: 30 tokens over 4 experts -> rows [8, 8, 7, 7] per source
  // (largest remainder); chunk c of an expert's n rows is [floor(nc/3),
  // floor(n(c+1)/3)): n = 8 -> 2, 3, 3 and n = 7 -> 2, 2, 3. Rank 0 sends
  // experts 1, 2, 3 to ranks 1, 2, 3: 6, 7, 9 rows of 4 x 2 bytes.
  std::vector<std::int64_t> sent;
  for (const Op& op : p.ops)
    if (op.kind == OpKind::kDispatchAllToAll && op.coords.phase == Phase::kForward && op.rank.value == 0)
      sent.push_back(op.bytes);
  EXPECT_EQ(sent, (std::vector<std::int64_t>{48, 56, 72}));
}

TEST(Structure, MPipeMoeAlternatesSendAndReceive) {
  MPipeMoeConfig c;
  c.common = common(shape(1, 4, 1), 4, 1);
  c.partitions = 3;
  c.strategy = ReuseStrategy::kS1;
  const Plan p = build_mpipemoe(c, balanced(1, 1, 4, 4, 1, 24));
  expect_valid(p);
  // mpipemoe Fig. 7(a): S1 S2 R1 S3 R2 R3.
  EXPECT_EQ(chunk_all_to_alls(p, 2), layer0_chunk_names({"D0", "D1", "C0", "D2", "C1", "C2"}));
}

struct QVector {
  double gemms = 0;
  int all_to_alls = 0;
  double copies = 0;
};

// Work of partition `chunk` on `rank` in units of mpipemoe Table II: GEMMs of
// b x M x H, all-to-alls, copies of b x M elements (b: the partition's rows).
std::pair<QVector, QVector> q_vectors(const Plan& p, int rank, int chunk) {
  std::pair<QVector, QVector> q;
  const std::int64_t m = p.dims.model_dim, h = p.dims.expert_hidden;
  std::int64_t rows = 0;
  for (const Op& op : p.ops)
    if (op.rank.value == rank && op.coords.chunk == chunk && op.kind == OpKind::kExpertFfn &&
        op.coords.phase == Phase::kForward)
      for (const auto& s : std::get<FfnForward>(op.data).rows) rows += s.count;
  for (const Op& op : p.ops) {
    if (op.rank.value != rank || op.coords.chunk != chunk) continue;
    QVector& v = op.coords.phase == Phase::kForward ? q.first : q.second;
    if (op.kind == OpKind::kExpertFfn || op.kind == OpKind::kRecompute) v.gemms += op.flops / (2.0 * rows * m * h);
    if (op.category() == Category::kAllToAll) ++v.all_to_alls;
    if (op.kind == OpKind::kOffload || op.kind == OpKind::kPrefetch)
      v.copies += static_cast<double>(op.bytes) / static_cast<double>(rows * m * p.dims.elem_bytes);
  }
  return q;
}

TEST(Structure, MPipeMoeTableTwoQVectors) {
  // Table II (NOTES.md): Q_fw, Q_bw = [GEMMs, all-to-alls, copies in b x M];
  // with H = 4M a T_M copy counts 4.
  const std::map<ReuseStrategy, std::pair<std::vector<double>, std::vector<double>>> table{
      {ReuseStrategy::kNone, {{2, 2, 0}, {4, 2, 0}}}, {ReuseStrategy::kS1, {{2, 2, 5}, {4, 2, 5}}},
      {ReuseStrategy::kS2, {{2, 2, 4}, {4, 3, 4}}},   {ReuseStrategy::kS3, {{2, 2, 1}, {5, 2, 1}}},
      {ReuseStrategy::kS4, {{2, 2, 0}, {5, 3, 0}}}};
  for (const auto& [strategy, want] : table) {
    MPipeMoeConfig c;
    c.common = common(shape(1, 4, 1, 4, 16), 4, 1);
    c.partitions = 2;
    c.strategy = strategy;
    const Plan p = build_mpipemoe(c, balanced(1, 1, 4, 4, 1, 32));
    expect_valid(p);
    for (int chunk = 0; chunk < 2; ++chunk) {
      const auto [fw, bw] = q_vectors(p, 1, chunk);
      SCOPED_TRACE(std::string(reuse_strategy_name(strategy)) + " partition " + std::to_string(chunk));
      EXPECT_DOUBLE_EQ(fw.gemms, want.first[0]);
      EXPECT_EQ(fw.all_to_alls, want.first[1]);
      EXPECT_DOUBLE_EQ(fw.copies, want.first[2]);
      EXPECT_DOUBLE_EQ(bw.gemms, want.second[0]);
      EXPECT_EQ(bw.all_to_alls, want.second[1]);
      EXPECT_DOUBLE_EQ(bw.copies, want.second[2]);
    }
  }
}

TEST(Structure, MPipeMoeEquationFiveSaving) {
  // One layer, balanced: every rank receives B = 64 rows (16 from each of 4
  // sources), n = 4 partitions of 16.
  const std::int64_t M = 4, H = 16, B = 64;
  const int n = 4;
  auto peak = [&](ReuseStrategy s) {
    MPipeMoeConfig c;
    c.common = common(shape(1, 4, 1, M, H), 4, 1);
    c.partitions = n;
    c.strategy = s;
    const Plan p = build_mpipemoe(c, balanced(1, 1, 4, 4, 1, 64));
    expect_valid(p);
    return issue_order_peak_bytes(p, RankId(3), [](const Buffer& b) {
      return b.memory == schema::MemoryKind::kDevice &&
             (b.tag == BufferTag::kTDI || b.tag == BufferTag::kTM || b.tag == BufferTag::kTDO);
    });
  };
  const std::int64_t elem = 2;
  // Without reuse all partitions of T_DI, T_M, T_DO are alive (Eq. 2's B M + B H + B M).
  EXPECT_EQ(peak(ReuseStrategy::kNone), (2 * B * M + B * H) * elem);
  // Eq. 5: saving B (2M (n-2)/n + H (n-1)/n).
  const std::int64_t saving = B * (2 * M * (n - 2) / n + H * (n - 1) / n) * elem;
  for (ReuseStrategy s : {ReuseStrategy::kS1, ReuseStrategy::kS2, ReuseStrategy::kS3, ReuseStrategy::kS4})
    EXPECT_EQ(peak(ReuseStrategy::kNone) - peak(s), saving) << reuse_strategy_name(s);
}

TEST(Structure, PpMoeOneForwardOneBackward) {
  PpMoeConfig c;
  c.common = common(shape(2, 4, 1), 2, 1);
  c.tensor_parallel = 1;
  c.pipeline_stages = 2;
  c.micro_batches = 3;
  const Plan p = build_ppmoe(c, balanced(1, 2, 3, 4, 1, 8));
  expect_valid(p);
  auto order = [&](int rank) {
    std::string s;
    for (const Op& op : p.ops)
      if (op.rank.value == rank && op.kind == OpKind::kGate)
        s += (op.coords.phase == Phase::kForward ? "F" : "B") + std::to_string(op.coords.micro_batch) + " ";
    return s;
  };
  // 1F1B (ppmoe Fig. 2): the first stage warms up with S-1 = 1 extra forward.
  EXPECT_EQ(order(0), "F0 F1 B0 F2 B1 B2 ");
  EXPECT_EQ(order(1), "F0 B0 F1 B1 F2 B2 ");
  const auto n = count_by_kind(p);
  EXPECT_EQ(n.at(OpKind::kPipelineSend), 2 * 3);  // activations forward, gradients backward
  EXPECT_EQ(n.count(OpKind::kDispatchAllToAll), 0u);
}

TEST(Structure, PpMoeTensorParallelCollectives) {
  PpMoeConfig c;
  c.common = common(shape(2, 4, 1), 4, 1);
  c.common.model.dense_hidden = 8;
  c.tensor_parallel = 2;
  c.micro_batches = 2;  // data_parallel = 2
  const Plan p = build_ppmoe(c, balanced(1, 2, 4, 4, 1, 8));
  expect_valid(p);
  const auto n = count_by_kind(p);
  // Per layer, micro-batch and TP rank: MoE all-reduce forward (outputs) and
  // backward (input gradients), dense all-reduce forward and backward.
  EXPECT_EQ(n.at(OpKind::kMoeAllReduce), 2 * 2 * 2 * 4);
  EXPECT_EQ(n.at(OpKind::kTensorParallelAllReduce), 2 * 2 * 2 * 4);
  EXPECT_EQ(n.at(OpKind::kIndexSlice), 2 * 2 * 2 * 4);
  // Gradient sync per layer: gate over all 4 ranks; 2 experts and the dense
  // slice per TP rank over the 2 data-parallel replicas.
  EXPECT_EQ(n.at(OpKind::kGradAllReduce), 2 * (4 + 2 * (2 + 1) * 2));
}

// A block that stands for two transformer layers (MoE on every other FFN,
// ppmoe Sec. 4.1) has two attention ops per pass, and the attention weights
// (Q, K, V, output: 4 M^2 per attention) are data parallel: their gradients
// are all-reduced once per layer over every rank, timing only.
TEST(Structure, AttentionOpsAndTheirGradientAllReduce) {
  DpMoeConfig c;
  c.common = common(shape(2, 8, 2, 16, 32), 4, 1);
  c.common.model.attention = true;
  c.common.model.sequence_length = 8;
  c.common.model.attention_per_block = 2;
  const Plan p = build_dpmoe(c, balanced(1, 2, 4, 8, 2, 16));
  expect_valid(p);
  const auto n = count_by_kind(p);
  EXPECT_EQ(n.at(OpKind::kAttention), 2 * 2 * 4 * 2);  // layers x passes x ranks x attentions
  int attention_all_reduces = 0;
  for (const Op& op : p.ops) {
    if (op.kind != OpKind::kGradAllReduce || op.name.find("attention") == std::string::npos) continue;
    ++attention_all_reduces;
    EXPECT_FALSE(op.collective()->moves_data) << op.name;
    EXPECT_EQ(op.bytes, 2 * 4 * 16 * 16 * 2) << op.name;  // 2 attentions x 4 M^2 x 2 bytes
  }
  EXPECT_EQ(attention_all_reduces, 2 * 4);  // per layer and rank

  // Tensor parallel (ppmoe): each TP rank all-reduces its slice, 1/T of the
  // weights, over the data-parallel replicas; none without replicas.
  PpMoeConfig pc;
  pc.common = c.common;
  pc.tensor_parallel = 2;
  pc.micro_batches = 2;  // data_parallel = 2
  const Plan pp = build_ppmoe(pc, balanced(1, 2, 4, 8, 2, 16));
  expect_valid(pp);
  attention_all_reduces = 0;
  for (const Op& op : pp.ops)
    if (op.kind == OpKind::kGradAllReduce && op.name.find("attention") != std::string::npos) {
      ++attention_all_reduces;
      EXPECT_EQ(op.bytes, 2 * 4 * 16 * 16 / 2 * 2) << op.name;
    }
  EXPECT_EQ(attention_all_reduces, 2 * 4);  // per layer: 2 TP ranks x 2 replicas
  pc.micro_batches = 1;
  pc.common.ranks = 2;  // data_parallel = 1: nothing to synchronise
  for (const Op& op : build_ppmoe(pc, balanced(1, 2, 1, 8, 2, 16)).ops)
    EXPECT_FALSE(op.kind == OpKind::kGradAllReduce && op.name.find("attention") != std::string::npos) << op.name;
}

TEST(Structure, AttentionPerBlockMustBePositive) {
  ModelShape m = shape(1, 4, 1);
  m.attention = true;
  m.attention_per_block = 0;
  try {
    m.validate();
    FAIL() << "attention_per_block 0 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("attention_per_block (0)"), std::string::npos) << e.what();
  }
  m.attention = false;  // only read with attention on
  EXPECT_NO_THROW(m.validate());
}

// Counts of a layer with 3 devices, 3 experts (expert e at device e),
// hand-made: device 0's expert is popular everywhere.
LayerRouting hand_routing() {
  return LayerRouting{3, 3, {6, 0, 0, /**/ 4, 1, 1, /**/ 4, 1, 1}};
}

TEST(ProProphetPlanner, HandWorkedGreedy) {
  const LayerRouting r = hand_routing();
  ProProphetModel m;
  m.bandwidth_bytes_per_s = 1;
  m.expert_tokens_per_s = 1;
  m.hide_under_computation = false;
  const PlannerSizes sizes{1.0, 2.0};
  // No placement: H = [14, 2, 2], R = [8, 1, 1]: Eq. 6 = 4 x 8 + 3 x 14.
  const auto none = placement_load(r, ExpertPlacement::none(3));
  EXPECT_EQ(none.computed, (std::vector<double>{14, 2, 2}));
  EXPECT_EQ(none.received, (std::vector<double>{8, 1, 1}));
  EXPECT_DOUBLE_EQ(estimate_layer_time(none, 3, 0, 0, m, sizes).total, 74.0);
  // n = 0: expert 0 goes everywhere; H = [6, 6, 6], R = [0, 1, 1];
  // Trans = Agg = 1 x 3 x 2 / 3 = 2: 4 + 18 + 4 = 26; balanced (Eq. 7).
  const ExpertPlacement p0 = pro_prophet_greedy(r, 0, 0.5, m, sizes);
  EXPECT_EQ(p0.selected, (std::vector<int>{0}));
  EXPECT_EQ(p0.replicas[0], (std::vector<int>{1, 2}));
  EXPECT_DOUBLE_EQ(estimate_layer_time(placement_load(r, p0), 3, 1, 0, m, sizes).total, 26.0);
  // n = 1: BottomK keeps expert 0 off device 1 (tie with device 2, lower
  // index first): H = [10, 2, 6], R = [4, 1, 1], Trans = Agg = 4/3.
  const ExpertPlacement p1 = pro_prophet_greedy(r, 1, 0.5, m, sizes);
  EXPECT_EQ(p1.replicas[0], (std::vector<int>{2}));
  EXPECT_TRUE(p1.replicas[1].empty() && p1.replicas[2].empty());
  EXPECT_NEAR(estimate_layer_time(placement_load(r, p1), 3, 1, 1, m, sizes).total, 16 + 30 + 8.0 / 3, 1e-12);
  // Eq. 8: with T_FEC = 10 the transfers hide completely.
  m.hide_under_computation = true;
  EXPECT_DOUBLE_EQ(estimate_layer_time(placement_load(r, p1), 3, 1, 1, m, sizes).total, 46.0);
}

TEST(ProProphetPlanner, BalancedLoadSelectsNothing) {
  const LayerRouting r{2, 2, {3, 3, 3, 3}};
  ProProphetModel m;
  EXPECT_TRUE(pro_prophet_greedy(r, 0, 0.25, m, PlannerSizes{1, 1}).selected.empty());
}

TEST(ProProphetPlanner, FasterMoeShadowsWhileItPays) {
  ProProphetModel m;
  m.bandwidth_bytes_per_s = 1;
  m.expert_tokens_per_s = 1;
  // Shadowing expert 0 gives 26 (above); adding expert 1 gives H = [6, 5, 7],
  // R = [0, 0, 1], Trans = Agg = 2 x 3 x 2 / 3 = 4: 4 + 21 + 8 = 33 > 26.
  const ExpertPlacement p = fastermoe_shadowing(hand_routing(), m, PlannerSizes{1.0, 2.0});
  EXPECT_EQ(p.selected, (std::vector<int>{0}));
  EXPECT_EQ(p.replicas[0], (std::vector<int>{1, 2}));
}

ExpertLoad shifting_load() {
  // Iteration 0 favours expert 0 (device 0), iteration 1 expert 3 (device 3).
  ExpertLoad l = ExpertLoad::zeros(2, 2, 4, 4, 1);
  for (int it = 0; it < 2; ++it)
    for (int layer = 0; layer < 2; ++layer)
      for (int s = 0; s < 4; ++s) {
        l.tokens_of(it, s) = 20;
        const int hot = it == 0 ? 0 : 3;
        for (int e = 0; e < 4; ++e) l.count(it, layer, s, e) = e == hot ? 14 : 2;
      }
  return l;
}

// DeepSpeed-MoE without token dropping (DpMoeConfig::capacity_padding) on
// shifting_load's iteration 0: every source routes [14, 2, 2, 2] of its 20
// tokens, so the capacity C = 14 (the largest count of any rank for any
// expert). By hand, M = 4, H = 16, 2-byte elements, one expert per rank:
// each peer segment of an all-to-all carries C rows = 14 x 4 x 2 = 112 bytes,
// 3 peers = 336 bytes on every rank (unpadded, rank 1 sends 14 + 2 + 2 rows
// = 144 bytes); every expert computes P C = 56 rows: forward 4 x 56 x 4 x 16
// = 14336 FLOPs; the einsum dispatch 2 S E C M = 2 x 20 x 4 x 14 x 4 = 8960
// FLOPs, the combine's backward twice that.
TEST(DpMoeCapacityPadding, PadsEverySegmentToTheLargestCount) {
  DpMoeConfig c{common(shape(2, 4, 1), 4, 2)};
  const ExpertLoad load = shifting_load();
  const Plan plain = build_dpmoe(c, load);
  c.capacity_padding = true;
  const Plan padded = build_dpmoe(c, load);
  ASSERT_TRUE(check_plan(padded).empty()) << check_plan(padded).front();
  auto first = [](const Plan& p, OpKind kind, int rank, Phase phase) -> const Op& {
    for (const auto& op : p.ops)
      if (op.kind == kind && op.rank.value == rank && op.coords.iteration == 0 && op.coords.layer == 0 &&
          op.coords.phase == phase)
        return op;
    throw std::runtime_error("op not found");
  };
  EXPECT_EQ(first(plain, OpKind::kDispatchAllToAll, 1, Phase::kForward).bytes, 144);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(first(padded, OpKind::kDispatchAllToAll, r, Phase::kForward).bytes, 336) << r;
    EXPECT_EQ(first(padded, OpKind::kCombineAllToAll, r, Phase::kBackward).bytes, 336) << r;
    EXPECT_DOUBLE_EQ(first(padded, OpKind::kExpertFfn, r, Phase::kForward).flops, 14336.0) << r;
    EXPECT_DOUBLE_EQ(first(padded, OpKind::kPermute, r, Phase::kForward).flops, 8960.0) << r;
    EXPECT_DOUBLE_EQ(first(padded, OpKind::kUnpermute, r, Phase::kBackward).flops, 2 * 8960.0) << r;
  }
  // The routed rows themselves are unchanged: the plan still runs. Padded,
  // each rank all-reduces the largest count (MAX) after its gate, once per
  // iteration and layer (sharded_moe.py, drop_tokens=False): 2 iterations x
  // 2 layers x 4 ranks = 16 ops more, 8 bytes each, on the comm stream
  // ahead of that layer's dispatch.
  EXPECT_EQ(padded.ops.size(), plain.ops.size() + 16);
  for (int r = 0; r < 4; ++r) {
    const Op& sync = first(padded, OpKind::kMoeAllReduce, r, Phase::kForward);
    EXPECT_EQ(sync.bytes, 8) << r;
    ASSERT_NE(sync.collective(), nullptr) << r;
    EXPECT_EQ(sync.collective()->kind, CollectiveKind::kAllReduce) << r;
    EXPECT_EQ(sync.collective()->group.size(), 4u) << r;
    const Op& dispatch = first(padded, OpKind::kDispatchAllToAll, r, Phase::kForward);
    EXPECT_EQ(sync.stream, dispatch.stream) << r;
    EXPECT_LT(sync.id.value, dispatch.id.value) << r;
  }
  for (const auto& op : plain.ops) EXPECT_NE(op.kind, OpKind::kMoeAllReduce) << op.name;
  // Received (Op::received_bytes, the trace's op_recv_bytes): unpadded,
  // rank 0 (expert 0) gets 14 rows from each of 3 peers = 42 x 8 = 336
  // bytes, ranks 1-3 get 2 rows from each = 6 x 8 = 48 bytes; padded, C = 14
  // rows from each peer on every rank = 336 bytes. Its own segment is not
  // counted. A gate is no all-to-all: -1.
  EXPECT_EQ(first(plain, OpKind::kDispatchAllToAll, 0, Phase::kForward).received_bytes(), 336);
  for (int r = 1; r < 4; ++r)
    EXPECT_EQ(first(plain, OpKind::kDispatchAllToAll, r, Phase::kForward).received_bytes(), 48) << r;
  for (int r = 0; r < 4; ++r)
    EXPECT_EQ(first(padded, OpKind::kDispatchAllToAll, r, Phase::kForward).received_bytes(), 336) << r;
  EXPECT_EQ(first(plain, OpKind::kGate, 0, Phase::kForward).received_bytes(), -1);
  EXPECT_EQ(first(plain, OpKind::kDispatchAllToAll, 0, Phase::kForward).send_recv_peer(), RankId{});
}

ProProphetConfig pro_prophet(bool scheduled) {
  ProProphetConfig c;
  c.common = common(shape(2, 4, 1), 4, 2);
  c.n = 1;
  c.alpha = 0.1;
  c.model = {.bandwidth_bytes_per_s = 1e12, .expert_tokens_per_s = 100, .fnec_seconds = 0.05, .bnec_seconds = 0.1};
  c.block_schedule = scheduled;
  return c;
}

TEST(ProProphetSchedule, PlanUsesThePreviousIteration) {
  const ExpertLoad l = shifting_load();
  const auto scheduled = pro_prophet_placements(pro_prophet(true), l);
  const auto unscheduled = pro_prophet_placements(pro_prophet(false), l);
  EXPECT_TRUE(scheduled[0][0].selected.empty());  // nothing to predict from
  EXPECT_EQ(scheduled[1][0].selected.front(), 0);  // planned during iteration 0
  EXPECT_EQ(unscheduled[1][0].selected.front(), 3);  // planned on its own gate output
}

TEST(ProProphetSchedule, AlgorithmTwoOrder) {
  const ExpertLoad l = shifting_load();
  const Plan p = build_pro_prophet(pro_prophet(true), l);
  expect_valid(p);
  // Rank 0 is home of expert 0, replicated in iteration 1 (layers 0 and 1).
  const auto comm = stream_ops(p, 0, "comm", "^L[01].it1.");
  auto pos = [&](const std::string& prefix) {
    const auto it = std::find_if(comm.begin(), comm.end(), [&](const std::string& s) { return s.rfind(prefix, 0) == 0; });
    EXPECT_NE(it, comm.end()) << prefix;
    return it - comm.begin();
  };
  // Forward: Trans of block 0 opens the iteration; SubTrans1 of block 1 after
  // block 0's dispatch, SubTrans2 after its combine (Alg. 2 lines 7-10).
  EXPECT_LT(pos("L0.it1.trans.e0"), pos("L0.it1.dispatch_all_to_all"));
  // Each block's dispatch is unpadded, so the ranks exchange their counts
  // before it: one all-to-all sending each of the 3 peers its 1 expert's
  // int64 count, 3 x 8 = 24 bytes.
  EXPECT_LT(pos("L0.it1.count_exchange"), pos("L0.it1.dispatch_all_to_all"));
  EXPECT_LT(pos("L1.it1.count_exchange"), pos("L1.it1.dispatch_all_to_all"));
  const Op& counts = *std::find_if(p.ops.begin(), p.ops.end(),
                                   [](const Op& o) { return o.name == "L0.it1.count_exchange" && o.rank.value == 0; });
  EXPECT_EQ(counts.bytes, 24);
  EXPECT_EQ(counts.received_bytes(), 24);  // each peer's count for rank 0's expert comes back
  EXPECT_EQ(counts.collective()->kind, CollectiveKind::kAllToAllV);
  for (const Op& o : p.ops) EXPECT_EQ(o.name.find("count_all_gather"), std::string::npos) << o.name;
  EXPECT_LT(pos("L0.it1.dispatch_all_to_all"), pos("L1.it1.sub_trans1.e0"));
  EXPECT_LT(pos("L1.it1.sub_trans1.e0"), pos("L0.it1.combine_all_to_all"));
  EXPECT_LT(pos("L0.it1.combine_all_to_all"), pos("L1.it1.sub_trans2.e0"));
  EXPECT_LT(pos("L1.it1.sub_trans2.e0"), pos("L1.it1.dispatch_all_to_all"));
  // Backward: SubAgg1 of block 1 before block 0's combine backward, SubAgg2
  // before its dispatch backward (lines 12-15); Agg of block 0 closes.
  EXPECT_LT(pos("L1.it1.dispatch_all_to_all.bwd"), pos("L1.it1.sub_agg1.e0"));
  EXPECT_LT(pos("L1.it1.sub_agg1.e0"), pos("L0.it1.combine_all_to_all.bwd"));
  EXPECT_LT(pos("L0.it1.combine_all_to_all.bwd"), pos("L1.it1.sub_agg2.e0"));
  EXPECT_LT(pos("L1.it1.sub_agg2.e0"), pos("L0.it1.dispatch_all_to_all.bwd"));
  EXPECT_LT(pos("L0.it1.dispatch_all_to_all.bwd"), pos("L0.it1.agg.e0"));
  // Plan of iteration 1 runs in iteration 0 between the permute and the
  // expert computation on the compute stream (beside the dispatch), and the
  // Trans it decides waits for it.
  const auto compute = stream_ops(p, 0, "compute", "^L1.it0.(permute|plan|expert_ffn)");
  EXPECT_EQ(compute.at(0), "L1.it0.permute");
  EXPECT_EQ(compute.at(1), "L1.it0.plan.for_it1");
  EXPECT_EQ(compute.at(2).rfind("L1.it0.expert_ffn", 0), 0u);
  const Op& plan_op = *std::find_if(p.ops.begin(), p.ops.end(),
                                    [](const Op& op) { return op.rank.value == 0 && op.name == "L1.it0.plan.for_it1"; });
  const Op& trans = *std::find_if(p.ops.begin(), p.ops.end(),
                                  [](const Op& op) { return op.rank.value == 0 && op.name == "L1.it1.sub_trans1.e0"; });
  EXPECT_NE(std::find(trans.deps.begin(), trans.deps.end(), plan_op.id), trans.deps.end());
  // The replicas compute tokens: an expert_ffn of expert 0 off its home.
  EXPECT_TRUE(std::any_of(p.ops.begin(), p.ops.end(), [](const Op& op) {
    const auto* f = std::get_if<FfnForward>(&op.data);
    return f && f->expert == 0 && op.rank.value != 0 && !f->rows.empty();
  }));
}

TEST(Checker, CatchesBrokenPlans) {
  DpMoeConfig c;
  c.common = common(shape(1, 4, 1), 2, 1);
  const Plan good = build_dpmoe(c, balanced(1, 1, 2, 4, 1, 8));
  ASSERT_TRUE(check_plan(good).empty());
  auto first = [](const Plan& p, OpKind k, Phase ph) {
    return static_cast<std::size_t>(std::find_if(p.ops.begin(), p.ops.end(), [&](const Op& op) {
                                       return op.kind == k && op.coords.phase == ph;
                                     }) - p.ops.begin());
  };
  auto has = [](const std::vector<std::string>& problems, const std::string& what) {
    return std::any_of(problems.begin(), problems.end(), [&](const std::string& s) { return s.find(what) != std::string::npos; });
  };
  {  // an all-to-all whose send and receive disagree
    Plan p = good;
    auto& col = std::get<Collective>(p.ops[first(p, OpKind::kDispatchAllToAll, Phase::kForward)].data);
    col.sends[1].view.rows += 1;
    EXPECT_TRUE(has(check_plan(p), "receives")) << check_plan(p).front();
  }
  {  // a collective missing a participant
    Plan p = good;
    auto& col = std::get<Collective>(p.ops[first(p, OpKind::kCombineAllToAll, Phase::kForward)].data);
    col.group.push_back(RankId(2));
    EXPECT_FALSE(check_plan(p).empty());
  }
  {  // a buffer never released
    Plan p = good;
    for (Op& op : p.ops)
      if (!op.free_after.empty()) {
        op.free_after.pop_back();
        break;
      }
    EXPECT_TRUE(has(check_plan(p), "freed 0 times"));
  }
  {  // an expert computation that does not wait for its dispatch
    Plan p = good;
    p.ops[first(p, OpKind::kExpertFfn, Phase::kForward)].deps.clear();
    EXPECT_FALSE(check_plan(p).empty());
  }
  {  // a dependency on a later op (a cycle in the making)
    Plan p = good;
    p.ops[0].deps.push_back(OpId(5));
    EXPECT_TRUE(has(check_plan(p), "is not an earlier op"));
  }
}

TEST(Checker, ExecutorRefusesRoutingTheGateDoesNotProduce) {
  DpMoeConfig c;
  c.common = common(shape(1, 4, 1), 2, 1);
  const ModelWeights w = random_weights(c.common.model, 3);
  const TrainingData d = random_training_data(c.common.model, 1, {8, 8}, 4);
  const ReferenceResult ref = reference_train(c.common.model, w, d);
  const ExpertLoad fake = balanced(1, 1, 2, 4, 1, 8);
  ASSERT_NE(fake.counts, ref.load.counts);
  try {
    execute_on_cpu(build_dpmoe(c, fake), w, d);
    FAIL() << "ran a plan built for another routing";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the gate routed"), std::string::npos) << e.what();
  }
}

}  // namespace structure_test
}  // namespace moetrace::plan
