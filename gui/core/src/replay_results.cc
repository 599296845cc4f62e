#include "moetrace/gui/replay_results.h"

#include <chrono>

#include "moetrace/gui/format.h"

namespace moetrace::gui {

std::string what_if_text(const analyzer::GraphWhatIfs& w) {
  std::string s;
  if (w.pipeline_degree > 0) s = "pipeline_degree=" + std::to_string(w.pipeline_degree);
  if (w.overlap) s += std::string(s.empty() ? "" : ", ") + "overlap=" + (*w.overlap ? "on" : "off");
  return s;
}

std::string replay_numbers_text(std::int64_t measured_ns, std::int64_t replayed_ns, std::int64_t predicted_ns) {
  std::string s = "measured " + format_duration(static_cast<double>(measured_ns)) + ", replayed " +
                  format_duration(static_cast<double>(replayed_ns)) + " (" +
                  format_change(analyzer::relative_error(measured_ns, replayed_ns)) + ")";
  if (predicted_ns >= 0)
    s += ", predicted " + format_duration(static_cast<double>(predicted_ns)) + " (" +
         format_change(analyzer::relative_error(replayed_ns, predicted_ns)) + ")";
  return s;
}

std::string ReplayResults::label() const {
  return predicted ? "predicted (" + what_if_text(what_ifs) + ")" : std::string("replayed");
}

const analyzer::ReplayIterationRow* ReplayResults::iteration(RankId rank, int iteration) const {
  for (const auto& r : summary.iterations)
    if (r.rank == rank.value && r.iteration == iteration) return &r;
  return nullptr;
}

const analyzer::ReplayLayerRow* ReplayResults::layer(int layer) const {
  for (const auto& r : summary.layers)
    if (r.layer == layer) return &r;
  return nullptr;
}

std::string ReplayResults::span_text(const Span& s) const {
  if (s.level == SpanLevel::kIteration) {
    if (const auto* r = iteration(s.rank, s.iteration))
      return "iteration " + std::to_string(s.iteration) + " on rank " + std::to_string(s.rank.value) + ": " +
             replay_numbers_text(r->measured_ns, r->replayed_ns, r->predicted_ns);
  } else if (s.level == SpanLevel::kLayer) {
    if (const auto* l = layer(s.layer))
      return "layer " + std::to_string(s.layer) + ", mean of " + std::to_string(l->windows) + " windows: " +
             replay_numbers_text(l->measured_ns, l->replayed_ns, l->predicted_ns);
  }
  return {};
}

ReplayResults compute_replay(const std::shared_ptr<const TimelineModel>& base, const ReplayRequest& request) {
  ReplayResults out;
  out.what_ifs = request.what_ifs;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    // The steps of analyzer::replay and replay_with_what_ifs (replay.h,
    // graph_whatif.h), keeping the trace the tracks show.
    const auto& trace = base->trace();
    const auto graph = analyzer::build_exec_graph(trace, request.graph);
    std::size_t unresolved = 0;
    auto replayed = std::make_shared<const analyzer::Trace>(
        analyzer::replayed_trace(trace, graph, analyzer::evaluate_exec_graph(graph, &unresolved)));
    std::shared_ptr<const analyzer::Trace> shown = replayed;
    if (request.what_ifs.empty()) {
      out.summary = analyzer::compare_replay(trace, *replayed, graph, nullptr, unresolved);
    } else {
      auto changed = graph;
      out.applied = analyzer::apply_graph_what_ifs(trace, changed, request.what_ifs, request.options);
      shown = std::make_shared<const analyzer::Trace>(
          analyzer::replayed_trace(trace, changed, analyzer::evaluate_exec_graph(changed)));
      out.summary = analyzer::compare_replay(trace, *replayed, graph, shown.get(), unresolved);
      out.predicted = true;
    }
    replayed.reset();
    ReplayRowOptions rows;
    rows.prefix = out.predicted ? "predicted" : "replayed";
    out.model = TimelineModel::with_replay(*base, std::move(shown), rows);
  } catch (const std::exception& e) {
    out.error = e.what();
    out.model.reset();
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return out;
}

}  // namespace moetrace::gui
