#include "moetrace/cuda/op_layout.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "moetrace/schema/error.h"

namespace moetrace::cuda {
namespace {

std::int64_t align(std::int64_t x) { return (x + 255) / 256 * 256; }

}  // namespace

const char* precision_name(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }

Precision parse_precision(std::string_view s) {
  if (s == "bf16") return Precision::kBf16;
  if (s == "fp32") return Precision::kFp32;
  throw ConfigError(fmt::format("precision ({}) must be bf16 or fp32", s));
}

const char* expert_gemm_name(ExpertGemm g) { return g == ExpertGemm::kGrouped ? "grouped" : "per_expert"; }

ExpertGemm parse_expert_gemm(std::string_view s) {
  if (s == "grouped") return ExpertGemm::kGrouped;
  if (s == "per_expert") return ExpertGemm::kPerExpert;
  throw ConfigError(fmt::format("expert GEMM ({}) must be grouped or per_expert", s));
}

DType buffer_dtype(const plan::Buffer& b, Precision p) {
  switch (b.tag) {
    case plan::BufferTag::kRouting:
    case plan::BufferTag::kGrads:
    case plan::BufferTag::kOptimizer:
      return DType::kFp32;
    default:
      return p == Precision::kBf16 ? DType::kBf16 : DType::kFp32;
  }
}

std::vector<std::int64_t> layout_table(const plan::RoutedLayout& layout) {
  const int C = layout.num_chunks;
  std::vector<std::int64_t> t;
  t.reserve(layout.experts.size() * static_cast<std::size_t>(layout_stride(C)));
  for (std::size_t i = 0; i < layout.experts.size(); ++i) {
    const std::int64_t n = layout.expert_rows[i];
    t.push_back(layout.experts[i]);
    t.push_back(n);
    for (int c = 0; c < C; ++c) {
      t.push_back(layout.offset(c, i));
      t.push_back(layout.chunk_begin(n, c));
    }
  }
  return t;
}

std::vector<std::int32_t> planned_assignment(const std::vector<std::int64_t>& counts,
                                             std::int64_t tokens, int top_k) {
  if (top_k < 1) throw Error(fmt::format("planned routing: top_k ({}) must be at least 1", top_k));
  const std::int64_t total = std::accumulate(counts.begin(), counts.end(), std::int64_t{0});
  if (total != tokens * top_k)
    throw Error(fmt::format("planned routing: counts sum to {}, expected tokens x top_k = {}", total,
                            tokens * top_k));
  for (std::size_t e = 0; e < counts.size(); ++e)
    if (counts[e] < 0 || counts[e] > tokens)
      throw Error(fmt::format("planned routing: expert {} gets {} of {} tokens", e, counts[e], tokens));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(tokens * top_k), -1);
  // Cell i of the walk is (token i % tokens, slot i / tokens): a run of at most
  // `tokens` consecutive cells never visits a token twice.
  std::int64_t cell = 0;
  for (std::size_t e = 0; e < counts.size(); ++e)
    for (std::int64_t r = 0; r < counts[e]; ++r, ++cell) {
      const std::int64_t t = cell % tokens, slot = cell / tokens;
      ids[static_cast<std::size_t>(t * top_k + slot)] = static_cast<std::int32_t>(e);
    }
  return ids;
}

GateSource gate_source(const plan::Plan& plan, const plan::Op& op) {
  if (!std::holds_alternative<plan::GateForward>(op.data)) return {};
  if (plan.variant != "ppmoe") return {op.rank.value, true};
  // ppmoe rank = (dp_group * pipeline_stages + stage) * tensor_parallel + tp_rank;
  // its blocks are dp_group * micro_batches + micro_batch (builders.h).
  int tp = 1, stages = 1, micro_batches = 1;
  try {
    const auto j = nlohmann::json::parse(plan.config_json);
    tp = j.value("tensor_parallel", 1);
    stages = j.value("pipeline_stages", 1);
    micro_batches = j.value("micro_batches", 1);
  } catch (const nlohmann::json::exception&) {
    return {};
  }
  if (tp < 1 || stages < 1 || micro_batches < 1) return {};
  const int r = op.rank.value;
  const int dp_group = r / tp / stages;
  return {dp_group * micro_batches + std::max(0, op.coords.micro_batch), r % tp == 0};
}

std::int64_t span_rows(const std::vector<plan::RowSpan>& spans) {
  std::int64_t r = 0;
  for (const auto& s : spans) r += s.count;
  return r;
}

OpWorkspace op_workspace(const plan::Plan& plan, const plan::Op& op, Precision p) {
  OpWorkspace w;
  std::int64_t at = 0;
  auto take = [&](std::int64_t& field, std::int64_t bytes) {
    field = at;
    at += align(std::max<std::int64_t>(bytes, 1));
  };
  const int E = plan.dims.num_experts;
  const int act = p == Precision::kBf16 ? 2 : 4;
  auto permute_maps = [&](const plan::RoutedLayout& l) {
    take(w.positions, l.tokens * l.top_k * 4);
    take(w.inverse, l.total_rows() * 4);
  };
  std::visit(
      [&](const auto& d) {
        using T = std::decay_t<decltype(d)>;
        if constexpr (std::is_same_v<T, plan::GateForward>) {
          take(w.logits, d.x.rows * E * 4);
        } else if constexpr (std::is_same_v<T, plan::GateBackward>) {
          take(w.logits, d.x.rows * E * 4);
        } else if constexpr (std::is_same_v<T, plan::Permute> ||
                             std::is_same_v<T, plan::PermuteBackward> ||
                             std::is_same_v<T, plan::Unpermute> ||
                             std::is_same_v<T, plan::UnpermuteBackward>) {
          permute_maps(d.layout);
        } else if constexpr (std::is_same_v<T, plan::FfnForward>) {
          const std::int64_t H = plan.buffer(d.params).cols;
          take(w.activation, span_rows(d.rows) * H * act);
          take(w.pointers, 3 * kMaxGemmGroups * 8);
        } else if constexpr (std::is_same_v<T, plan::FfnBackward>) {
          const std::int64_t H = plan.buffer(d.params).cols;
          take(w.activation, span_rows(d.rows) * H * act);
          take(w.gradient, span_rows(d.rows) * H * act);
          take(w.pointers, 3 * kMaxGemmGroups * 8);
        } else if constexpr (std::is_same_v<T, plan::FfnRecompute>) {
          take(w.pointers, 3 * kMaxGemmGroups * 8);
        } else if constexpr (std::is_same_v<T, plan::TimingOnly>) {
          if (d.attention) {
            take(w.attention, plan_attention(*d.attention, dtype_bytes(buffer_dtype(plan.buffer(d.attention->input.buffer), p))).bytes);
          } else if (d.plan_search) {
            take(w.plan_search, static_cast<std::int64_t>(d.plan_search->experts) * 4);
          } else if (op.flops > 0) {
            take(w.busy, kBusyTile * kBusyTile * 4);
          }
        }
      },
      op.data);
  w.bytes = at;
  return w;
}

double AttentionPlan::flops() const {
  double f = 0;
  for (const AttentionStep& s : steps)
    if (s.kind == AttentionStep::Kind::kGemm)
      f += 2.0 * static_cast<double>(s.gemm.m) * static_cast<double>(s.gemm.n) * static_cast<double>(s.gemm.k) *
           static_cast<double>(s.batch);
  return f;
}

AttentionPlan plan_attention(const plan::AttentionWork& w, int elem_bytes) {
  using R = AttentionRegion;
  using K = AttentionStep::Kind;
  AttentionPlan p;
  const std::int64_t S = w.sequence_length, d = w.head_dim, M = w.model_dim;
  const std::int64_t hd = w.heads * d;
  const std::int64_t tokens = w.input.rows;
  const std::int64_t items = w.sequences * w.heads;  // (sequence, head) pairs
  const std::int64_t total = w.sequences * S * hd;   // elements of Q (or K, V, context)
  if (S <= 0 || d <= 0 || w.heads <= 0 || tokens <= 0 || items <= 0) return p;
  const std::int64_t slice =
      std::clamp<std::int64_t>(kAttentionScoresBytes / std::max<std::int64_t>(S * S * elem_bytes, 1), 1, items);

  std::int64_t elems[static_cast<int>(R::kCount)] = {};
  auto need = [&](R r, std::int64_t n) { elems[static_cast<int>(r)] = n; };
  need(R::kWqkv, M * 3 * hd);
  need(R::kQkv, 3 * total);
  need(R::kScores, slice * S * S);
  need(R::kContext, total);
  need(R::kWo, hd * M);
  if (!w.backward) {
    need(R::kOut, tokens * M);
  } else {
    need(R::kX, tokens * M);
    need(R::kProbs, slice * S * S);
    need(R::kDContext, total);
    need(R::kDQkv, 3 * total);
    need(R::kDWo, hd * M);
    need(R::kDWqkv, M * 3 * hd);
    need(R::kDX, tokens * M);
  }
  elems[static_cast<int>(R::kInput)] = tokens * M;
  for (int r = 0; r < static_cast<int>(R::kCount); ++r) p.region_elems[r] = elems[r];
  for (int r = 1; r < static_cast<int>(R::kCount); ++r) {
    if (elems[r] == 0) continue;
    p.region_offset[r] = p.bytes;
    p.bytes += align(elems[r] * elem_bytes);
  }

  auto gemm = [&](RowMajorGemm g, AttentionOperand a, AttentionOperand b, AttentionOperand c,
                  std::int64_t batch = 1, float alpha = 1.0f) {
    p.steps.push_back({.kind = K::kGemm, .gemm = g, .batch = batch, .alpha = alpha, .a = a, .b = b, .c = c});
  };
  auto at = [](R r, std::int64_t offset = 0, std::int64_t stride = 0) { return AttentionOperand{r, offset, stride}; };
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const std::int64_t q = 0, k = total, v = 2 * total;  // Q, K, V in kQkv and dQ, dK, dV in kDQkv
  const std::int64_t sd = S * d, ss = S * S;
  if (!w.backward) {
    gemm(row_major(false, false, tokens, 3 * hd, M), at(R::kInput), at(R::kWqkv), at(R::kQkv));
    for (std::int64_t i = 0; i < items; i += slice) {
      const std::int64_t n = std::min(slice, items - i);
      gemm(row_major(false, true, S, S, d), at(R::kQkv, q + i * sd, sd), at(R::kQkv, k + i * sd, sd),
           at(R::kScores, 0, ss), n, scale);
      AttentionStep sm;
      sm.kind = K::kSoftmax;
      sm.c = at(R::kScores);
      sm.rows = n * S;
      sm.cols = S;
      p.steps.push_back(sm);
      gemm(row_major(false, false, S, d, S), at(R::kScores, 0, ss), at(R::kQkv, v + i * sd, sd),
           at(R::kContext, i * sd, sd), n);
    }
    gemm(row_major(false, false, tokens, M, hd), at(R::kContext), at(R::kWo), at(R::kOut));
    return p;
  }
  // Backward, from the output projection down: dContext, dWo; per slice dP,
  // dV, the softmax's backward, dQ, dK; then dX and dWqkv.
  gemm(row_major(false, true, tokens, hd, M), at(R::kInput), at(R::kWo), at(R::kDContext));
  gemm(row_major(true, false, hd, M, tokens), at(R::kContext), at(R::kInput), at(R::kDWo));
  for (std::int64_t i = 0; i < items; i += slice) {
    const std::int64_t n = std::min(slice, items - i);
    gemm(row_major(false, true, S, S, d), at(R::kDContext, i * sd, sd), at(R::kQkv, v + i * sd, sd),
         at(R::kScores, 0, ss), n);
    gemm(row_major(true, false, S, d, S), at(R::kProbs, 0, ss), at(R::kDContext, i * sd, sd),
         at(R::kDQkv, v + i * sd, sd), n);
    AttentionStep sb;
    sb.kind = K::kSoftmaxBackward;
    sb.b = at(R::kProbs);
    sb.c = at(R::kScores);
    sb.rows = n * S;
    sb.cols = S;
    p.steps.push_back(sb);
    gemm(row_major(false, false, S, d, S), at(R::kScores, 0, ss), at(R::kQkv, k + i * sd, sd),
         at(R::kDQkv, q + i * sd, sd), n, scale);
    gemm(row_major(true, false, S, d, S), at(R::kScores, 0, ss), at(R::kQkv, q + i * sd, sd),
         at(R::kDQkv, k + i * sd, sd), n, scale);
  }
  gemm(row_major(false, true, tokens, M, 3 * hd), at(R::kDQkv), at(R::kWqkv), at(R::kDX));
  gemm(row_major(true, false, M, 3 * hd, tokens), at(R::kX), at(R::kDQkv), at(R::kDWqkv));
  return p;
}

BusyGemm busy_gemm(double flops) {
  BusyGemm b;
  if (!(flops > 0)) return b;
  const double per_k = 2.0 * kBusyTile * kBusyTile;  // FLOPs per unit of k
  const auto total_k = static_cast<std::int64_t>(std::ceil(flops / per_k));
  b.reps = (total_k + kBusyMaxK - 1) / kBusyMaxK;
  b.k = (total_k + b.reps - 1) / b.reps;
  b.k = std::max<std::int64_t>(8, (b.k + 7) / 8 * 8);
  return b;
}

}  // namespace moetrace::cuda
