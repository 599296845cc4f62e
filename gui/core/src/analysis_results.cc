#include "moetrace/gui/analysis_results.h"

#include <cstdio>

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

}  // namespace

AnalysisResults compute_analysis_results(const analyzer::Trace& trace) {
  // Locality and memory bubbles (analyzer/locality.h, memory.h) are not
  // connected here yet: they stay nullopt and their panels say so.
  AnalysisResults r;
  try {
    r.recommendations = recommendations(trace);
  } catch (const Error&) {
    // An unusable cost model: the panel shows "not available".
  }
  return r;
}

}  // namespace moetrace::gui
