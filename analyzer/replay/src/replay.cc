#include "moetrace/analyzer/replay.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <tuple>

#include "moetrace/analyzer/breakdown.h"

namespace moetrace::analyzer {

double relative_error(std::int64_t a, std::int64_t b) {
  return a != 0 ? static_cast<double>(b - a) / static_cast<double>(a) : 0.0;
}

namespace {

// (rank, iteration) -> window; (layer) -> (rank, iteration) -> window.
struct Windows {
  std::map<std::pair<std::int32_t, std::int32_t>, std::int64_t> iterations;
  std::map<std::int32_t, std::map<std::pair<std::int32_t, std::int32_t>, std::int64_t>> layers;
};

Windows windows_of(const Trace& t) {
  Windows w;
  const auto b = compute_breakdown(t);
  for (const auto& row : b.iterations) w.iterations[{row.rank, row.iteration}] = row.t.window_ns;
  if (w.iterations.empty())
    for (const auto& row : b.ranks) w.iterations[{row.rank, -1}] = row.t.window_ns;
  for (const auto& lw : b.layer_windows) w.layers[lw.layer][{lw.rank, lw.iteration}] = lw.ns;
  return w;
}

}  // namespace

ReplaySummary compare_replay(const Trace& measured, const Trace& replayed, const ExecGraph& g, const Trace* predicted,
                             std::size_t unresolved) {
  ReplaySummary s;
  const auto m = windows_of(measured);
  const auto r = windows_of(replayed);
  Windows p;
  if (predicted != nullptr) p = windows_of(*predicted);
  auto lookup = [](const auto& map, const auto& key, std::int64_t fallback) {
    auto it = map.find(key);
    return it == map.end() ? fallback : it->second;
  };
  for (const auto& [key, ns] : m.iterations) {
    ReplayIterationRow row{key.first, key.second, ns, lookup(r.iterations, key, 0), -1};
    if (predicted != nullptr) row.predicted_ns = lookup(p.iterations, key, 0);
    s.max_iteration_error = std::max(s.max_iteration_error, std::abs(relative_error(row.measured_ns, row.replayed_ns)));
    s.iterations.push_back(row);
  }
  for (const auto& [layer, by_window] : m.layers) {
    ReplayLayerRow row;
    row.layer = layer;
    std::int64_t sum_m = 0, sum_r = 0, sum_p = 0;
    for (const auto& [key, ns] : by_window) {
      ++row.windows;
      sum_m += ns;
      auto rl = r.layers.find(layer);
      sum_r += rl == r.layers.end() ? 0 : lookup(rl->second, key, 0);
      if (predicted != nullptr) {
        auto pl = p.layers.find(layer);
        sum_p += pl == p.layers.end() ? 0 : lookup(pl->second, key, 0);
      }
    }
    row.measured_ns = sum_m / std::max(1, row.windows);
    row.replayed_ns = sum_r / std::max(1, row.windows);
    if (predicted != nullptr) row.predicted_ns = sum_p / std::max(1, row.windows);
    s.max_layer_error = std::max(s.max_layer_error, std::abs(relative_error(row.measured_ns, row.replayed_ns)));
    s.layers.push_back(row);
  }
  s.nodes = static_cast<std::int64_t>(g.nodes.size());
  s.edges = static_cast<std::int64_t>(g.edges.size());
  s.edge_counts = g.edge_counts;
  s.latencies = g.latencies;
  s.unexplained = g.unexplained;
  s.unexplained_ns = g.unexplained_ns;
  s.unlaunched = g.unlaunched;
  s.collective_instances = g.collective_instances;
  s.missing = g.missing;
  s.unresolved = static_cast<std::int64_t>(unresolved);
  if (unresolved > 0)
    s.missing.push_back(std::to_string(unresolved) +
                        " points sit on or after a cycle of the graph (times that contradict each other); they keep "
                        "their measured times");
  return s;
}

void add_start_shifts(const Trace& trace, const ExecGraph& g, const std::vector<std::int64_t>& times,
                      ReplaySummary& s) {
  std::vector<std::int64_t> shift;
  shift.reserve(trace.activities.size());
  for (std::size_t i = 0; i < trace.activities.size() && i < g.activity_start.size(); ++i)
    if (g.activity_start[i] != ExecGraph::kNone)
      shift.push_back(std::abs(times[g.activity_start[i]] - trace.activities[i].start_ns));
  if (shift.empty()) return;
  auto at = [&](double q) {
    const auto k = static_cast<std::size_t>(q * static_cast<double>(shift.size() - 1));
    std::nth_element(shift.begin(), shift.begin() + static_cast<std::ptrdiff_t>(k), shift.end());
    return shift[k];
  };
  s.start_shift_p50_ns = at(0.5);
  s.start_shift_p99_ns = at(0.99);
}

ReplaySummary replay(const Trace& trace, const ExecGraphOptions& options) {
  const auto g = build_exec_graph(trace, options);
  std::size_t unresolved = 0;
  const auto times = evaluate_exec_graph(g, &unresolved);
  const auto r = replayed_trace(trace, g, times);
  auto s = compare_replay(trace, r, g, nullptr, unresolved);
  add_start_shifts(trace, g, times, s);
  return s;
}

}  // namespace moetrace::analyzer
