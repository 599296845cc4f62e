#include "moetrace/analyzer/locality.h"

#include <algorithm>
#include <cmath>
#include <map>

namespace moetrace::analyzer {

LocalityPair compare_loads(const std::vector<std::int64_t>& from, const std::vector<std::int64_t>& to) {
  LocalityPair p;
  const std::size_t n = std::max(from.size(), to.size());
  auto at = [](const std::vector<std::int64_t>& v, std::size_t i) {
    return i < v.size() ? static_cast<double>(v[i]) : 0.0;
  };
  double dot = 0, na = 0, nb = 0, sa = 0, sb = 0, abs_diff = 0;
  double best_a = -1, best_b = -1;
  for (std::size_t i = 0; i < n; ++i) {
    const double a = at(from, i), b = at(to, i);
    dot += a * b;
    na += a * a;
    nb += b * b;
    sa += a;
    sb += b;
    abs_diff += std::fabs(a - b);
    if (a > best_a) {
      best_a = a;
      p.heaviest_from = static_cast<std::int32_t>(i);
    }
    if (b > best_b) {
      best_b = b;
      p.heaviest_to = static_cast<std::int32_t>(i);
    }
  }
  if (na == 0 && nb == 0) p.cosine_similarity = 1;
  else if (na == 0 || nb == 0) p.cosine_similarity = 0;
  else p.cosine_similarity = dot / (std::sqrt(na) * std::sqrt(nb));
  for (std::size_t i = 0; i < n; ++i) {
    const double a = sa > 0 ? at(from, i) / sa : 0.0, b = sb > 0 ? at(to, i) / sb : 0.0;
    p.l1_distance += std::fabs(a - b);
  }
  p.relative_l1_error = sb > 0 ? abs_diff / sb : (sa > 0 ? 1.0 : 0.0);
  return p;
}

namespace {

struct Accumulator {
  int pairs = 0;
  double cos = 0, l1 = 0, err = 0, heaviest = 0;
  void add(const LocalityPair& p) {
    ++pairs;
    cos += p.cosine_similarity;
    l1 += p.l1_distance;
    err += p.relative_l1_error;
    heaviest += p.heaviest_predicted() ? 1.0 : 0.0;
  }
  LocalityPoint point(std::int32_t distance) const {
    LocalityPoint q;
    q.distance = distance;
    q.pairs = pairs;
    if (pairs > 0) {
      q.cosine_similarity = cos / pairs;
      q.l1_distance = l1 / pairs;
      q.relative_l1_error = err / pairs;
      q.heaviest_predicted = heaviest / pairs;
    }
    return q;
  }
};

}  // namespace

LocalityAnalysis analyze_locality(const Trace& trace, int max_distance) {
  LocalityAnalysis a;
  a.max_distance = max_distance;
  if (trace.expert_load.empty()) return a;
  a.has_load = true;
  // layer -> iteration -> tokens per expert.
  std::map<std::int32_t, std::map<std::int32_t, std::vector<std::int64_t>>> load;
  for (const auto& e : trace.expert_load) {
    if (e.expert < 0) continue;
    auto& v = load[e.layer][e.iteration];
    if (v.size() <= static_cast<std::size_t>(e.expert)) v.resize(static_cast<std::size_t>(e.expert) + 1, 0);
    v[static_cast<std::size_t>(e.expert)] += e.tokens;
  }
  std::map<std::int32_t, Accumulator> all;
  for (const auto& [layer, iterations] : load) {
    LayerLocality ll;
    ll.layer = layer;
    ll.iterations = static_cast<int>(iterations.size());
    std::map<std::int32_t, Accumulator> by_distance;
    for (auto it = iterations.begin(); it != iterations.end(); ++it)
      for (int d = 1; d <= max_distance; ++d) {
        auto next = iterations.find(it->first + d);
        if (next == iterations.end()) continue;
        auto p = compare_loads(it->second, next->second);
        p.layer = layer;
        p.from_iteration = it->first;
        p.to_iteration = next->first;
        by_distance[d].add(p);
        all[d].add(p);
        if (d == 1) {
          ll.min_cosine_similarity = std::min(ll.min_cosine_similarity, p.cosine_similarity);
          a.pairs.push_back(p);
        }
      }
    for (const auto& [d, acc] : by_distance) ll.curve.push_back(acc.point(d));
    if (auto it = by_distance.find(1); it != by_distance.end()) ll.consecutive = it->second.point(1);
    a.layers.push_back(std::move(ll));
  }
  for (const auto& [d, acc] : all) a.curve.push_back(acc.point(d));
  return a;
}

}  // namespace moetrace::analyzer
