#include "moetrace/analyzer/layer_workload.h"

#include <algorithm>

#include "moetrace/plan/routing.h"

namespace moetrace::analyzer {

std::int64_t MoeLayerWorkload::tokens_of(int source) const {
  std::int64_t rows = 0;
  for (int e = 0; e < routing.experts; ++e) rows += routing.count(source, e);
  const int k = std::max(1, top_k);
  return (rows + k - 1) / k;
}

std::int64_t MoeLayerWorkload::max_tokens_per_rank() const {
  std::int64_t best = 0;
  for (int q = 0; q < routing.devices; ++q) best = std::max(best, tokens_of(q));
  return best;
}

std::vector<std::int64_t> MoeLayerWorkload::rows_computed() const {
  std::vector<std::int64_t> rows(static_cast<std::size_t>(std::max(routing.devices, 0)), 0);
  for (int src = 0; src < routing.devices; ++src)
    for (int e = 0; e < routing.experts; ++e) rows[static_cast<std::size_t>(routing.home(e))] += routing.count(src, e);
  return rows;
}

std::int64_t MoeLayerWorkload::max_rows_computed() const {
  const auto rows = rows_computed();
  return rows.empty() ? 0 : *std::max_element(rows.begin(), rows.end());
}

std::int64_t MoeLayerWorkload::max_rows_routed() const {
  std::int64_t best = 0;
  for (int src = 0; src < routing.devices; ++src) {
    std::int64_t rows = 0;
    for (int e = 0; e < routing.experts; ++e) rows += routing.count(src, e);
    best = std::max(best, rows);
  }
  return best;
}

plan::LayerRouting balanced_routing(int ranks, int experts, int top_k, std::int64_t tokens_per_rank) {
  plan::ExpertLoad load = plan::synthetic_load(plan::SyntheticLoadConfig{
      1, 1, ranks, experts, top_k, tokens_per_rank, plan::LoadPattern::kBalanced, 1.0, 0.9, 0.0, 1});
  return plan::LayerRouting{ranks, experts, load.counts};
}

}  // namespace moetrace::analyzer
