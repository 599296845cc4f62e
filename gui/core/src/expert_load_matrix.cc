#include "moetrace/gui/expert_load_matrix.h"

#include <algorithm>

namespace moetrace::gui {

std::int64_t ExpertLoadGrid::layer_total(std::size_t layer_pos) const {
  std::int64_t s = 0;
  for (int e = 0; e < experts; ++e) s += std::max<std::int64_t>(0, at(layer_pos, e));
  return s;
}

ExpertLoadIndex ExpertLoadIndex::from_trace(const analyzer::Trace& trace) {
  ExpertLoadIndex x;
  const auto& load = trace.expert_load;  // sorted by (iteration, layer, src_rank, expert)
  constexpr int kMaxExperts = 1 << 16;   // a damaged trace must not make us allocate terabytes
  for (std::size_t i = 0; i < load.size();) {
    std::size_t j = i;
    while (j < load.size() && load[j].iteration == load[i].iteration) ++j;
    x.iterations_.push_back(load[i].iteration);
    x.ranges_.emplace_back(i, j);
    i = j;
  }
  for (const auto& l : load) {
    if (l.expert >= 0 && l.expert < kMaxExperts) x.experts_ = std::max(x.experts_, l.expert + 1);
    x.layers_.push_back(l.layer);
  }
  std::sort(x.layers_.begin(), x.layers_.end());
  x.layers_.erase(std::unique(x.layers_.begin(), x.layers_.end()), x.layers_.end());
  for (std::size_t p = 0; p < x.iterations_.size(); ++p) {
    const auto g = x.grid(trace, p);
    for (auto t : g.tokens) x.max_tokens_ = std::max(x.max_tokens_, t);
  }
  return x;
}

ExpertLoadGrid ExpertLoadIndex::grid(const analyzer::Trace& trace, std::size_t pos) const {
  ExpertLoadGrid g;
  if (pos >= iterations_.size()) return g;
  g.iteration = iterations_[pos];
  g.layers = layers_;
  g.experts = experts_;
  g.tokens.assign(layers_.size() * static_cast<std::size_t>(experts_), -1);
  const auto [b, e] = ranges_[pos];
  for (std::size_t i = b; i < e; ++i) {
    const auto& l = trace.expert_load[i];
    if (l.expert < 0 || l.expert >= experts_) continue;
    const auto lp = static_cast<std::size_t>(
        std::lower_bound(layers_.begin(), layers_.end(), l.layer) - layers_.begin());
    auto& cell = g.tokens[lp * static_cast<std::size_t>(experts_) + static_cast<std::size_t>(l.expert)];
    cell = std::max<std::int64_t>(cell, 0) + l.tokens;
  }
  return g;
}

}  // namespace moetrace::gui
