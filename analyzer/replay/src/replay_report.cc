// `moetrace replay`'s output (replay.h).
#include <fmt/format.h>

#include <cmath>
#include <ostream>

#include "moetrace/analyzer/replay.h"
#include "moetrace/analyzer/format.h"

namespace moetrace::analyzer {
namespace {

std::string pct(double v) { return fmt::format("{:+.2f}%", 100.0 * v); }

}  // namespace

void write_replay_text(std::ostream& out, const Trace& trace, const ReplaySummary& s,
                       const std::vector<std::string>& what_ifs) {
  const bool predicted = !what_ifs.empty();
  out << "moetrace replay: " << trace.run.path << "\n";
  out << fmt::format("execution graph: {} points, {} edges (", s.nodes, s.edges);
  bool first = true;
  for (int k = 0; k < kNumExecEdgeKinds; ++k) {
    if (s.edge_counts[static_cast<std::size_t>(k)] == 0) continue;
    out << (first ? "" : ", ") << exec_edge_kind_name(static_cast<ExecEdgeKind>(k)) << " "
        << s.edge_counts[static_cast<std::size_t>(k)];
    first = false;
  }
  out << ")\n";
  for (const auto& l : s.latencies)
    out << fmt::format(
        "rank {}: launch latency {} kernels (median of {}), {} copies ({}), {} memsets ({}); queue gap {} (median of "
        "{})\n",
        l.rank, format_duration(l.launch_ns[0]), l.launch_samples[0], format_duration(l.launch_ns[1]),
        l.launch_samples[1], format_duration(l.launch_ns[2]), l.launch_samples[2], format_duration(l.queue_gap_ns),
        l.queue_gap_samples);
  if (!s.missing.empty()) {
    out << "What the trace does not record, and what the graph does instead:\n";
    for (const auto& m : s.missing) out << "- " << m << "\n";
  }
  if (predicted) {
    out << "What-ifs:\n";
    for (const auto& w : what_ifs) out << "- " << w << "\n";
  }
  out << "\nIterations (measured: the trace; replayed: its execution graph with the measured durations"
      << (predicted ? "; predicted: the graph after the what-ifs" : "") << ")\n";
  out << fmt::format("  {:>5} {:>9} {:>12} {:>12} {:>9}", "rank", "iteration", "measured", "replayed", "error");
  if (predicted) out << fmt::format(" {:>12} {:>9}", "predicted", "change");
  out << "\n";
  for (const auto& r : s.iterations) {
    out << fmt::format("  {:>5} {:>9} {:>12} {:>12} {:>9}", r.rank, r.iteration < 0 ? std::string("span") : std::to_string(r.iteration),
                       format_duration(r.measured_ns), format_duration(r.replayed_ns),
                       pct(relative_error(r.measured_ns, r.replayed_ns)));
    if (predicted)
      out << fmt::format(" {:>12} {:>9}", format_duration(r.predicted_ns), pct(relative_error(r.replayed_ns, r.predicted_ns)));
    out << "\n";
  }
  out << fmt::format("worst iteration error: {:.2f}%; GPU activities' starts moved by {} (median), {} (99th "
                     "percentile)\n",
                     100.0 * s.max_iteration_error, format_duration(s.start_shift_p50_ns),
                     format_duration(s.start_shift_p99_ns));
  if (!s.layers.empty()) {
    out << "\nMoE layers (mean window over ranks and iterations)\n";
    out << fmt::format("  {:>5} {:>7} {:>12} {:>12} {:>9}", "layer", "windows", "measured", "replayed", "error");
    if (predicted) out << fmt::format(" {:>12} {:>9}", "predicted", "change");
    out << "\n";
    for (const auto& l : s.layers) {
      out << fmt::format("  {:>5} {:>7} {:>12} {:>12} {:>9}", l.layer, l.windows, format_duration(l.measured_ns),
                         format_duration(l.replayed_ns), pct(relative_error(l.measured_ns, l.replayed_ns)));
      if (predicted)
        out << fmt::format(" {:>12} {:>9}", format_duration(l.predicted_ns),
                           pct(relative_error(l.replayed_ns, l.predicted_ns)));
      out << "\n";
    }
    out << fmt::format("worst layer error: {:.2f}%\n", 100.0 * s.max_layer_error);
  }
}

nlohmann::json replay_json(const Trace& trace, const ReplaySummary& s, const std::vector<std::string>& what_ifs) {
  using nlohmann::json;
  json j;
  j["trace"] = trace.run.path;
  json edges = json::object();
  for (int k = 0; k < kNumExecEdgeKinds; ++k)
    edges[std::string(exec_edge_kind_name(static_cast<ExecEdgeKind>(k)))] = s.edge_counts[static_cast<std::size_t>(k)];
  json lat = json::array();
  for (const auto& l : s.latencies)
    lat.push_back({{"rank", l.rank},
                   {"launch_ns", {{"kernel", l.launch_ns[0]}, {"memcpy", l.launch_ns[1]}, {"memset", l.launch_ns[2]}}},
                   {"launch_samples",
                    {{"kernel", l.launch_samples[0]}, {"memcpy", l.launch_samples[1]}, {"memset", l.launch_samples[2]}}},
                   {"queue_gap_ns", l.queue_gap_ns},
                   {"queue_gap_samples", l.queue_gap_samples}});
  j["graph"] = {{"nodes", s.nodes},
                {"edges", s.edges},
                {"edge_counts", edges},
                {"latencies", lat},
                {"unexplained", s.unexplained},
                {"unexplained_ns", s.unexplained_ns},
                {"unlaunched", s.unlaunched},
                {"collective_instances", s.collective_instances},
                {"unresolved", s.unresolved},
                {"start_shift_p50_ns", s.start_shift_p50_ns},
                {"start_shift_p99_ns", s.start_shift_p99_ns},
                {"missing", s.missing}};
  j["what_ifs"] = what_ifs;
  // A row's measured and replayed times, their error and, with what-ifs,
  // the prediction, beside the row's own keys.
  auto times = [&](json row, const auto& r) {
    row["measured_ns"] = r.measured_ns;
    row["replayed_ns"] = r.replayed_ns;
    row["error"] = relative_error(r.measured_ns, r.replayed_ns);
    if (!what_ifs.empty()) row["predicted_ns"] = r.predicted_ns;
    return row;
  };
  json its = json::array();
  for (const auto& r : s.iterations) its.push_back(times({{"rank", r.rank}, {"iteration", r.iteration}}, r));
  j["iterations"] = std::move(its);
  json layers = json::array();
  for (const auto& l : s.layers) layers.push_back(times({{"layer", l.layer}, {"windows", l.windows}}, l));
  j["layers"] = std::move(layers);
  j["max_iteration_error"] = s.max_iteration_error;
  j["max_layer_error"] = s.max_layer_error;
  return j;
}

}  // namespace moetrace::analyzer
