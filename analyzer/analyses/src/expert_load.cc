#include "moetrace/analyzer/expert_load.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "moetrace/plan/routing.h"

namespace moetrace::analyzer {

double load_mean(const std::vector<std::int64_t>& v) {
  if (v.empty()) return 0.0;
  double s = 0;
  for (auto x : v) s += static_cast<double>(x);
  return s / static_cast<double>(v.size());
}

double load_stddev(const std::vector<std::int64_t>& v) {
  if (v.empty()) return 0.0;
  const double mean = load_mean(v);
  double s = 0;
  for (auto x : v) s += (static_cast<double>(x) - mean) * (static_cast<double>(x) - mean);
  return std::sqrt(s / static_cast<double>(v.size()));
}

namespace {

// The ratios of a layer's iterations (LoadRow) that its summary
// (LayerLoadSummary) gives the mean of.
constexpr std::pair<double LayerLoadSummary::*, double LoadRow::*> kMeanRatios[] = {
    {&LayerLoadSummary::expert_max_over_mean, &LoadRow::expert_max_over_mean},
    {&LayerLoadSummary::expert_cv, &LoadRow::expert_cv},
    {&LayerLoadSummary::device_max_over_mean_home, &LoadRow::device_max_over_mean_home},
    {&LayerLoadSummary::device_max_over_mean, &LoadRow::device_max_over_mean},
    {&LayerLoadSummary::balance_degree_home, &LoadRow::balance_degree_home},
    {&LayerLoadSummary::balance_degree, &LoadRow::balance_degree},
};

double max_over_mean(const std::vector<std::int64_t>& v) {
  const double mean = load_mean(v);
  return mean > 0 ? static_cast<double>(*std::max_element(v.begin(), v.end())) / mean : 0.0;
}

std::int32_t argmax(const std::vector<std::int64_t>& v) {
  if (v.empty()) return -1;
  return static_cast<std::int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

}  // namespace

ExpertLoadAnalysis analyze_expert_load(const Trace& trace, const Breakdown& breakdown) {
  ExpertLoadAnalysis a;
  if (trace.expert_load.empty()) return a;
  a.has_load = true;
  a.origin = trace.expert_load_origin;

  // Experts per layer: the layers table, or the highest expert index seen.
  std::map<std::int32_t, int> experts;
  for (const auto& l : trace.layers)
    if (l.num_experts > 0) experts[l.layer] = l.num_experts;
  int devices = std::max(1, trace.run.world_size);
  for (const auto& e : trace.expert_load) {
    auto& n = experts[e.layer];
    n = std::max(n, e.expert + 1);
    devices = std::max(devices, e.src_rank + 1);
  }
  for (const auto& p : trace.placements) devices = std::max(devices, p.rank + 1);
  a.devices = devices;
  for (const auto& [l, n] : experts) a.experts = std::max(a.experts, n);

  // Placement per (iteration, layer): home rank and copies per expert.
  struct Placement {
    std::map<std::int32_t, std::int32_t> home;
    std::set<std::pair<std::int32_t, std::int32_t>> copies;  // (expert, rank)
    int copy_rows = 0;
  };
  std::map<std::pair<std::int32_t, std::int32_t>, Placement> placements;
  for (const auto& p : trace.placements) {
    auto& pl = placements[{p.iteration, p.layer}];
    if (p.role == "home") {
      pl.home[p.expert] = p.rank;
    } else {
      pl.copies.insert({p.expert, p.rank});
      ++pl.copy_rows;
    }
  }

  // Times per (layer, iteration, rank), forward + backward, from the breakdown.
  struct RankTime {
    std::int64_t window = 0, expert = 0;
  };
  std::map<std::pair<std::int32_t, std::int32_t>, std::map<std::int32_t, RankTime>> times;
  for (const auto& r : breakdown.rows) {
    auto& t = times[{r.layer, r.iteration}][r.rank];
    t.window += r.t.window_ns;
    t.expert += r.t.at(Category::kExpertCompute);
  }

  const auto& load = trace.expert_load;  // sorted by (iteration, layer, src, expert)
  std::vector<LoadRow> rows;
  for (std::size_t i = 0; i < load.size();) {
    const auto iteration = load[i].iteration, layer = load[i].layer;
    std::size_t j = i;
    while (j < load.size() && load[j].iteration == iteration && load[j].layer == layer) ++j;
    const int E = experts[layer];
    const auto P = static_cast<std::size_t>(devices);
    LoadRow row;
    row.layer = layer;
    row.iteration = iteration;
    row.tokens_per_expert.assign(static_cast<std::size_t>(E), 0);
    row.tokens_per_device_home.assign(P, 0);
    row.tokens_per_device.assign(P, 0);
    row.received_per_device.assign(P, 0);
    const Placement* pl = nullptr;
    if (auto it = placements.find({iteration, layer}); it != placements.end()) pl = &it->second;
    row.has_placement = pl != nullptr;
    row.copies = pl ? pl->copy_rows : 0;
    auto home_of = [&](std::int32_t e) -> std::size_t {
      if (pl)
        if (auto h = pl->home.find(e); h != pl->home.end()) return static_cast<std::size_t>(h->second);
      return static_cast<std::size_t>(static_cast<std::int64_t>(e) * devices / std::max(1, E));
    };
    for (std::size_t k = i; k < j; ++k) {
      const auto& l = load[k];
      row.tokens_per_expert[static_cast<std::size_t>(l.expert)] += l.tokens;
      row.total_tokens += l.tokens;
      const auto home = home_of(l.expert);
      row.tokens_per_device_home[home] += l.tokens;
      // A source rank holding a copy computes its own tokens for the expert.
      const bool local = pl && l.src_rank >= 0 && static_cast<std::size_t>(l.src_rank) < P &&
                         (static_cast<std::size_t>(l.src_rank) == home ||
                          pl->copies.count({l.expert, l.src_rank}) > 0);
      const auto where = local ? static_cast<std::size_t>(l.src_rank) : home;
      row.tokens_per_device[where] += l.tokens;
      if (static_cast<std::int64_t>(where) != l.src_rank) row.received_per_device[where] += l.tokens;
    }
    row.heaviest_expert = argmax(row.tokens_per_expert);
    row.expert_max_over_mean = max_over_mean(row.tokens_per_expert);
    const double em = load_mean(row.tokens_per_expert);
    row.expert_cv = em > 0 ? load_stddev(row.tokens_per_expert) / em : 0.0;
    row.busiest_rank = argmax(row.tokens_per_device);
    row.device_max_over_mean_home = max_over_mean(row.tokens_per_device_home);
    row.device_max_over_mean = max_over_mean(row.tokens_per_device);
    row.balance_degree_home = plan::balance_degree(row.tokens_per_device_home);
    row.balance_degree = plan::balance_degree(row.tokens_per_device);
    row.rb = plan::rb(row.balance_degree_home, row.balance_degree);

    if (auto it = times.find({layer, iteration}); it != times.end() && !it->second.empty()) {
      std::int64_t sum_window = 0, sum_expert = 0;
      for (const auto& [rank, t] : it->second) {
        sum_window += t.window;
        sum_expert += t.expert;
        if (t.window > row.slowest_window_ns) {
          row.slowest_window_ns = t.window;
          row.slowest_rank = rank;
        }
      }
      const auto n = static_cast<std::int64_t>(it->second.size());
      row.mean_window_ns = sum_window / n;
      row.mean_expert_compute_ns = sum_expert / n;
      auto busiest = it->second.find(row.busiest_rank);
      row.busiest_expert_compute_ns = busiest != it->second.end() ? busiest->second.expert : 0;
    }
    rows.push_back(std::move(row));
    i = j;
  }
  std::sort(rows.begin(), rows.end(), [](const LoadRow& x, const LoadRow& y) {
    return std::tie(x.layer, x.iteration) < std::tie(y.layer, y.iteration);
  });

  for (std::size_t i = 0; i < rows.size();) {
    LayerLoadSummary s;
    s.layer = rows[i].layer;
    s.experts = static_cast<int>(rows[i].tokens_per_expert.size());
    s.devices = devices;
    s.tokens_per_expert.assign(rows[i].tokens_per_expert.size(), 0);
    int timed = 0;
    std::int64_t imbalance = 0, busiest = 0, mean_expert = 0;
    std::size_t j = i;
    for (; j < rows.size() && rows[j].layer == s.layer; ++j) {
      const auto& r = rows[j];
      ++s.iterations;
      for (std::size_t e = 0; e < r.tokens_per_expert.size() && e < s.tokens_per_expert.size(); ++e)
        s.tokens_per_expert[e] += r.tokens_per_expert[e];
      for (const auto& [mean, ratio] : kMeanRatios) s.*mean += r.*ratio;
      s.has_placement = s.has_placement || r.has_placement;
      if (r.slowest_window_ns >= 0) {
        ++timed;
        imbalance += r.imbalance_ns();
        busiest += r.busiest_expert_compute_ns;
        mean_expert += r.mean_expert_compute_ns;
      }
    }
    const double n = s.iterations;
    for (const auto& [mean, ratio] : kMeanRatios) s.*mean /= n;
    s.rb = plan::rb(s.balance_degree_home, s.balance_degree);
    if (timed > 0) {
      s.imbalance_ns = imbalance / timed;
      s.busiest_expert_compute_ns = busiest / timed;
      s.mean_expert_compute_ns = mean_expert / timed;
    }
    a.layers.push_back(std::move(s));
    i = j;
  }
  a.rows = std::move(rows);
  return a;
}

}  // namespace moetrace::analyzer
