#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <set>

#include "moetrace/cuda/op_layout.h"
#include "moetrace/cuda/row_major_gemm.h"
#include "moetrace/plan/routing.h"
#include "moetrace/schema/error.h"
#include "variant_plans.h"

namespace moetrace::cuda {
namespace {

TEST(LayoutTable, RowsFollowTheRoutedLayout) {
  plan::RoutedLayout l;
  l.tokens = 9;
  l.top_k = 2;
  l.num_chunks = 3;
  l.experts = {2, 0, 3, 1};
  l.expert_rows = {5, 0, 7, 6};
  const auto table = layout_table(l);
  const int stride = layout_stride(l.num_chunks);
  ASSERT_EQ(table.size(), l.experts.size() * static_cast<std::size_t>(stride));
  std::set<std::int64_t> rows;
  for (std::size_t i = 0; i < l.experts.size(); ++i) {
    const std::int64_t* entry = table.data() + i * static_cast<std::size_t>(stride);
    EXPECT_EQ(entry[0], l.experts[i]);
    const std::int64_t n = l.expert_rows[i];
    for (std::int64_t q = 0; q < n; ++q) {
      int c = 0;
      while (!(l.chunk_begin(n, c) <= q && q < l.chunk_begin(n, c + 1))) ++c;
      const std::int64_t want = l.offset(c, i) + q - l.chunk_begin(n, c);
      EXPECT_EQ(layout_row(entry, l.num_chunks, q), want) << "expert " << l.experts[i] << " q " << q;
      rows.insert(want);
    }
    EXPECT_EQ(layout_row(entry, l.num_chunks, n), -1);
  }
  EXPECT_EQ(static_cast<std::int64_t>(rows.size()), l.total_rows());
  EXPECT_EQ(*rows.rbegin(), l.total_rows() - 1);
}

TEST(PlannedAssignment, EveryTokenGetsTopKDistinctExpertsAndCountsMatch) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int E = 1 + static_cast<int>(rng() % 12);
    const int k = 1 + static_cast<int>(rng() % static_cast<unsigned>(E));
    const std::int64_t T = 1 + static_cast<std::int64_t>(rng() % 40);
    // Random valid counts: deal T*k cells, no expert above T.
    std::vector<std::int64_t> counts(static_cast<std::size_t>(E), 0);
    for (std::int64_t c = 0; c < T * k;) {
      const auto e = static_cast<std::size_t>(rng() % static_cast<unsigned>(E));
      if (counts[e] < T) {
        ++counts[e];
        ++c;
      }
    }
    const auto ids = planned_assignment(counts, T, k);
    std::vector<std::int64_t> got(static_cast<std::size_t>(E), 0);
    for (std::int64_t t = 0; t < T; ++t) {
      std::set<int> mine;
      for (int s = 0; s < k; ++s) {
        const int e = ids[static_cast<std::size_t>(t * k + s)];
        ASSERT_GE(e, 0);
        ASSERT_LT(e, E);
        mine.insert(e);
        ++got[static_cast<std::size_t>(e)];
      }
      EXPECT_EQ(static_cast<int>(mine.size()), k);
    }
    EXPECT_EQ(got, counts);
  }
}

TEST(PlannedAssignment, InvalidCountsAreErrors) {
  EXPECT_THROW(planned_assignment({3, 3}, 4, 2), Error);     // 6 != 8
  EXPECT_THROW(planned_assignment({5, 3}, 4, 2), Error);     // 5 > 4 tokens
  EXPECT_THROW(planned_assignment({4, 4}, 4, 0), Error);
}

TEST(BufferDtype, RoutingAndGradientsStayFp32) {
  plan::Buffer b;
  b.tag = plan::BufferTag::kTDI;
  EXPECT_EQ(buffer_dtype(b, Precision::kBf16), DType::kBf16);
  EXPECT_EQ(buffer_dtype(b, Precision::kFp32), DType::kFp32);
  for (auto t : {plan::BufferTag::kRouting, plan::BufferTag::kGrads, plan::BufferTag::kOptimizer}) {
    b.tag = t;
    EXPECT_EQ(buffer_dtype(b, Precision::kBf16), DType::kFp32);
  }
  b.tag = plan::BufferTag::kParams;
  b.rows = 3;
  b.cols = 5;
  EXPECT_EQ(buffer_bytes(b, Precision::kBf16), 30);
  EXPECT_EQ(buffer_bytes(b, Precision::kFp32), 60);
  EXPECT_EQ(parse_precision("bf16"), Precision::kBf16);
  EXPECT_THROW(parse_precision("fp16"), ConfigError);
}

TEST(ExpertGemm, NamesParseBackAndAnUnknownOneIsAConfigError) {
  for (ExpertGemm g : {ExpertGemm::kGrouped, ExpertGemm::kPerExpert})
    EXPECT_EQ(parse_expert_gemm(expert_gemm_name(g)), g);
  EXPECT_STREQ(expert_gemm_name(ExpertGemm::kPerExpert), "per_expert");
  EXPECT_THROW(parse_expert_gemm("batched"), ConfigError);
}

plan::Plan dpmoe_plan() {
  plan::ModelShape m{.num_layers = 1, .num_experts = 4, .top_k = 2, .model_dim = 8, .expert_hidden = 16};
  plan::SyntheticLoadConfig lc{.sources = 2, .experts = 4, .top_k = 2, .tokens_per_source = 10};
  auto plans = testing::variant_plans(m, 2, 1, plan::synthetic_load(lc));
  return plans.front().plan;
}

TEST(GateSource, ExpertParallelSourcesAreRanks) {
  const plan::Plan p = dpmoe_plan();
  int gates = 0;
  for (const auto& op : p.ops) {
    if (std::holds_alternative<plan::GateForward>(op.data)) {
      EXPECT_EQ(gate_source(p, op).block, op.rank.value);
      EXPECT_TRUE(gate_source(p, op).counted);
      ++gates;
    } else {
      EXPECT_EQ(gate_source(p, op).block, -1);
      EXPECT_FALSE(gate_source(p, op).counted);
    }
  }
  EXPECT_EQ(gates, 2);
}

TEST(OpWorkspace, SizesCoverEveryScratchAndAreAligned) {
  const plan::Plan p = dpmoe_plan();
  for (const auto& op : p.ops) {
    const OpWorkspace w = op_workspace(p, op, Precision::kBf16);
    const OpWorkspace w32 = op_workspace(p, op, Precision::kFp32);
    EXPECT_EQ(w.bytes % 256, 0);
    EXPECT_LE(w.bytes, w32.bytes);
    for (std::int64_t off : {w.logits, w.positions, w.inverse, w.activation, w.gradient, w.pointers, w.busy}) {
      if (off < 0) continue;
      EXPECT_EQ(off % 256, 0);
      EXPECT_LT(off, w.bytes);
    }
    if (const auto* f = std::get_if<plan::FfnBackward>(&op.data)) {
      const std::int64_t rows = span_rows(f->rows);
      EXPECT_GE(w.gradient - w.activation, rows * 16 * 2);
      EXPECT_GE(w.bytes - w.pointers, 3 * kMaxGemmGroups * 8);
    }
    if (const auto* g = std::get_if<plan::GateForward>(&op.data)) {
      EXPECT_GE(w.bytes, g->x.rows * 4 * 4);
    }
    if (const auto* u = std::get_if<plan::Unpermute>(&op.data)) {
      EXPECT_GE(w.inverse - w.positions, u->layout.tokens * u->layout.top_k * 4);
      EXPECT_GE(w.bytes - w.inverse, u->layout.total_rows() * 4);
    }
  }
}

// Every variant with attention, in shapes where the sequences and heads
// divide evenly: 256-wide model (2 heads of 128), 16-token sequences.
std::vector<testing::NamedPlan> attention_plans() {
  plan::ModelShape s{.num_layers = 2, .num_experts = 8, .top_k = 2, .model_dim = 256, .expert_hidden = 64,
                     .dense_hidden = 32, .attention = true, .sequence_length = 16};
  plan::SyntheticLoadConfig lc{.iterations = 2, .layers = 2, .sources = 4, .experts = 8, .top_k = 2,
                               .tokens_per_source = 64};
  return testing::variant_plans(s, 4, 2, plan::synthetic_load(lc));
}

// Elements an operand spans: its last batch item's rows x leading dimension.
std::int64_t extent(const AttentionOperand& o, bool trans, std::int64_t rows, std::int64_t cols, std::int64_t ld,
                    std::int64_t batch) {
  const std::int64_t stored_rows = trans ? cols : rows;
  return o.offset + (batch - 1) * o.stride + stored_rows * ld;
}

TEST(AttentionPlan, RunsTheOpsFlopsInGemmsOfItsShape) {
  int checked = 0;
  for (const auto& [name, p] : attention_plans()) {
    for (const plan::Op& op : p.ops) {
      if (op.kind != OpKind::kAttention) continue;
      const auto* t = std::get_if<plan::TimingOnly>(&op.data);
      ASSERT_NE(t, nullptr) << name;
      ASSERT_TRUE(t->attention.has_value()) << name << " " << op.name;
      const plan::AttentionWork& w = *t->attention;
      EXPECT_EQ(w.head_dim, 128) << name;
      EXPECT_EQ(w.sequence_length, 16) << name;
      EXPECT_EQ(w.sequences * w.sequence_length, w.input.rows) << name;
      const plan::Buffer& in = p.buffer(w.input.buffer);
      EXPECT_EQ(in.rank, op.rank) << name;
      EXPECT_EQ(in.cols, w.model_dim) << name;
      EXPECT_LE(w.input.row + w.input.rows, in.rows) << name;
      EXPECT_TRUE(std::any_of(op.buffers.begin(), op.buffers.end(),
                              [&](const auto& b) { return b.buffer == w.input.buffer; }))
          << name << ": the op reads a buffer it does not declare";
      const AttentionPlan a = plan_attention(w, 2);
      EXPECT_NEAR(a.flops(), op.flops, 1e-9 * op.flops) << name << " " << op.name;
      // The batched GEMMs are (sequence, head) problems of S x S x d and S x d x S.
      bool batched = false;
      for (const AttentionStep& st : a.steps) {
        if (st.kind != AttentionStep::Kind::kGemm) {
          EXPECT_EQ(st.cols, w.sequence_length);
          continue;
        }
        const RowMajorGemm& g = st.gemm;
        const auto elems = [&](AttentionRegion r) { return a.region_elems[static_cast<int>(r)]; };
        EXPECT_LE(extent(st.a, g.trans_a, g.m, g.k, g.lda, st.batch), elems(st.a.region)) << name;
        EXPECT_LE(extent(st.b, g.trans_b, g.k, g.n, g.ldb, st.batch), elems(st.b.region)) << name;
        EXPECT_LE(extent(st.c, false, g.m, g.n, g.ldc, st.batch), elems(st.c.region)) << name;
        EXPECT_NE(st.c.region, AttentionRegion::kInput) << "attention writes no tensor of the plan";
        if (st.batch > 1 || g.m == w.sequence_length) {
          batched = true;
          EXPECT_EQ(std::min({g.m, g.n, g.k}), std::min(w.sequence_length, w.head_dim));
        }
      }
      EXPECT_TRUE(batched);
      const OpWorkspace ws = op_workspace(p, op, Precision::kBf16);
      EXPECT_GE(ws.bytes - ws.attention, a.bytes);
      ++checked;
    }
  }
  EXPECT_GE(checked, 8);
}

TEST(AttentionPlan, ScoresAreMadeInSlicesOfBoundedScratch) {
  plan::AttentionWork w;
  w.input = plan::View{BufferId(0), 0, 8 * 2048};
  w.sequences = 8;
  w.sequence_length = 2048;
  w.model_dim = 4096;
  w.heads = 32;
  w.head_dim = 128;
  for (bool backward : {false, true}) {
    w.backward = backward;
    const AttentionPlan a = plan_attention(w, 2);
    EXPECT_LE(a.region_elems[static_cast<int>(AttentionRegion::kScores)] * 2, kAttentionScoresBytes);
    std::int64_t items = 0;
    for (const AttentionStep& st : a.steps)
      if (st.kind == AttentionStep::Kind::kGemm && st.c.region == AttentionRegion::kScores) items += st.batch;
    EXPECT_EQ(items, w.sequences * w.heads);  // every (sequence, head) once
    const double forward = 8.0 * 16384 * 4096.0 * 4096 + 4.0 * 16384 * 2048.0 * 4096;
    EXPECT_NEAR(a.flops(), (backward ? 2 : 1) * forward, 1e-9 * forward);
  }
}

TEST(PlanSearch, ReadsItsRanksRoutingAndFitsTheKernel) {
  int checked = 0;
  for (const auto& [name, p] : attention_plans()) {
    for (const plan::Op& op : p.ops) {
      if (op.kind != OpKind::kPlan) continue;
      const auto& t = std::get<plan::TimingOnly>(op.data);
      ASSERT_TRUE(t.plan_search.has_value()) << name << " " << op.name;
      const plan::PlanSearchWork& s = *t.plan_search;
      const plan::Buffer& routing = p.buffer(s.routing.buffer);
      EXPECT_EQ(routing.rank, op.rank);
      EXPECT_EQ(routing.cols, 2 * s.top_k);
      EXPECT_EQ(s.routing.rows, routing.rows);
      EXPECT_EQ(s.experts, 8);
      EXPECT_EQ(s.devices, 4);
      const OpWorkspace ws = op_workspace(p, op, Precision::kBf16);
      EXPECT_GE(ws.bytes - ws.plan_search, s.experts * 4);
      EXPECT_LT(ws.busy, 0);
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(BusyGemm, CoversTheFlops) {
  for (double flops : {1.0, 1e6, 3.3e9, 1e12}) {
    const BusyGemm b = busy_gemm(flops);
    const double done = 2.0 * kBusyTile * kBusyTile * static_cast<double>(b.k * b.reps);
    EXPECT_GE(done, flops);
    EXPECT_LE(b.k, kBusyMaxK + 8);
    EXPECT_LE(done, flops * 1.01 + 2.0 * kBusyTile * kBusyTile * 8 * static_cast<double>(b.reps));
  }
  EXPECT_EQ(busy_gemm(0).reps, 0);
}

// Column-major GEMM as cuBLAS defines it.
void col_major_gemm(bool ta, bool tb, std::int64_t m, std::int64_t n, std::int64_t k, const double* A,
                    std::int64_t lda, const double* B, std::int64_t ldb, double* C, std::int64_t ldc) {
  for (std::int64_t j = 0; j < n; ++j)
    for (std::int64_t i = 0; i < m; ++i) {
      double s = 0;
      for (std::int64_t l = 0; l < k; ++l) {
        const double a = ta ? A[l + i * lda] : A[i + l * lda];
        const double b = tb ? B[j + l * ldb] : B[l + j * ldb];
        s += a * b;
      }
      C[i + j * ldc] = s;
    }
}

TEST(RowMajorGemm, ColumnMajorCallComputesTheRowMajorProduct) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-1, 1);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      const std::int64_t m = 5, n = 3, k = 4;
      // Row-major operands with padding in the leading dimension.
      RowMajorGemm g = row_major(ta, tb, m, n, k);
      g.lda += 2;
      g.ldb += 1;
      g.ldc += 3;
      const std::int64_t a_rows = ta ? k : m, b_rows = tb ? n : k;
      std::vector<double> A(static_cast<std::size_t>(a_rows * g.lda)), B(static_cast<std::size_t>(b_rows * g.ldb));
      for (double& x : A) x = u(rng);
      for (double& x : B) x = u(rng);
      std::vector<double> C(static_cast<std::size_t>(m * g.ldc), 0.0);
      const ColumnMajorGemm c = to_column_major(g);
      col_major_gemm(c.trans_first, c.trans_second, c.m, c.n, c.k, B.data(), c.ld_first, A.data(),
                     c.ld_second, C.data(), c.ldc);
      for (std::int64_t i = 0; i < m; ++i)
        for (std::int64_t j = 0; j < n; ++j) {
          double want = 0;
          for (std::int64_t l = 0; l < k; ++l) {
            const double a = ta ? A[static_cast<std::size_t>(l * g.lda + i)] : A[static_cast<std::size_t>(i * g.lda + l)];
            const double b = tb ? B[static_cast<std::size_t>(j * g.ldb + l)] : B[static_cast<std::size_t>(l * g.ldb + j)];
            want += a * b;
          }
          EXPECT_NEAR(C[static_cast<std::size_t>(i * g.ldc + j)], want, 1e-12) << ta << tb << i << j;
        }
    }
}

}  // namespace
}  // namespace moetrace::cuda
