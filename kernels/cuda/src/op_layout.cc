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
          if (op.flops > 0) take(w.busy, kBusyTile * kBusyTile * 4);
        }
      },
      op.data);
  w.bytes = at;
  return w;
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
