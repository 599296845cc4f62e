#include "moetrace/gui/analysis_results.h"

#include <algorithm>
#include <cstdio>

#include "moetrace/analyzer/locality.h"
#include "moetrace/analyzer/memory.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/schema/error.h"

namespace moetrace::gui {

namespace {

// analyzer/recommend.h, one item per layer and subject. The panel reads a
// negative gain as "not predicted"; a change that costs time (memory reuse
// buys memory with time) shows 0 and says its cost in the evidence.
RecommendationData recommendations(const analyzer::Trace& trace) {
  RecommendationData out;
  for (const auto& it : analyzer::recommend(trace).items) {
    Recommendation r;
    r.layer = it.layer;
    r.subject = it.subject;
    r.action = it.action;
    r.evidence = it.evidence;
    if (it.gain_known) {
      r.predicted_gain = it.predicted_gain >= 0 ? it.predicted_gain : 0.0;
      if (it.predicted_gain < 0) {
        char cost[64];
        std::snprintf(cost, sizeof cost, " Predicted cost: %.1f %% of the layer time.", -100.0 * it.predicted_gain);
        r.evidence += cost;
      }
    }
    out.items.push_back(std::move(r));
  }
  return out;
}

// analyzer/locality.h: the cosine similarity of the load of iterations d
// apart, per layer and over all layers (-1); nullopt without expert load.
std::optional<LocalityData> locality(const analyzer::Trace& trace) {
  const auto a = analyzer::analyze_locality(trace);
  if (!a.has_load) return std::nullopt;
  LocalityData d;
  d.metric = "cosine similarity of the expert load";
  d.min_value = 1;
  d.max_value = 1;
  auto curve = [&](std::int32_t layer, const std::vector<analyzer::LocalityPoint>& points) {
    LocalityCurve c;
    c.layer = layer;
    for (const auto& p : points) {
      if (p.pairs == 0) continue;
      c.points.push_back({p.distance, p.cosine_similarity});
      d.min_value = std::min(d.min_value, p.cosine_similarity);
    }
    if (!c.points.empty()) d.curves.push_back(std::move(c));
  };
  curve(-1, a.curve);
  for (const auto& l : a.layers) curve(l.layer, l.curve);
  d.min_value = std::max(0.0, d.min_value - 0.05);
  return d;
}

// analyzer/memory.h: the bubbles of the buffers linked to ops, and the
// byte-time in bubbles per rank; nullopt where no buffer is linked to ops.
std::optional<MemoryBubbleData> memory_bubbles(const analyzer::Trace& trace) {
  const auto m = analyzer::analyze_memory(trace);
  if (!m.has_buffer_usage) return std::nullopt;
  MemoryBubbleData d;
  for (const auto& b : m.bubbles)
    d.bubbles.push_back({b.rank, b.start_ns, b.end_ns, b.bytes, b.buffer, b.tag, b.layer, b.chunk});
  for (const auto& r : m.ranks) d.ranks.push_back({RankId(r.rank), r.memory_bubble_bytes_ns, -1});
  return d;
}

template <typename F>
void run(F&& f, std::string& error) {
  try {
    f();
  } catch (const std::exception& e) {
    error = e.what();
  }
}

}  // namespace

AnalysisResults compute_analysis_results(const analyzer::Trace& trace) {
  AnalysisResults r;
  run([&] { r.locality = locality(trace); }, r.locality_error);
  run([&] { r.memory_bubbles = memory_bubbles(trace); }, r.memory_error);
  run([&] { r.recommendations = recommendations(trace); }, r.recommendations_error);
  return r;
}

}  // namespace moetrace::gui
