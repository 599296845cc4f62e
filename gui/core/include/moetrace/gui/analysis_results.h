// The data the locality, memory-bubble and recommendation panels show, as
// plain structs: the analyzer's analyses fill them (compute_analysis_results),
// the panels only draw them. A field is nullopt where its analysis found
// nothing to work on (no expert load across iterations, no buffers linked to
// ops) or failed; `*_error` then says why it failed, and empty means it had
// nothing to work on. An analysis that ran and found nothing to show (no
// recommendations) is a present, empty value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::gui {

// Locality of expert load across iterations: how alike the load of
// iteration i and i + distance is (Pro-Prophet's observation that load
// changes slowly is what makes placement planning pay off).
struct LocalityCurve {
  std::int32_t layer = -1;  // -1: all layers together
  struct Point {
    std::int32_t distance = 1;  // iterations apart
    double value = 0;           // in LocalityData::metric units
  };
  std::vector<Point> points;  // by distance
};

struct LocalityData {
  std::string metric;      // what value means, for the axis: "cosine similarity of load"
  double min_value = 0, max_value = 1;
  std::vector<LocalityCurve> curves;
};

// Allocated but idle memory (mpipemoe Sec. 3: a buffer between its last use
// in the forward pass and its next use in the backward pass).
struct MemoryBubble {
  RankId rank;
  std::int64_t start_ns = 0, end_ns = 0;
  std::int64_t bytes = 0;
  BufferId buffer;
  std::string buffer_tag;  // T_I, T_DI, T_M, T_DO, T_O, ...
  std::int32_t layer = -1, chunk = -1;
};

struct MemoryBubbleData {
  std::vector<MemoryBubble> bubbles;  // by rank, then start
  struct RankTotal {
    RankId rank;
    double bubble_bytes_ns = 0;        // memory_bubble_bytes_ns
    std::int64_t bound_bytes = -1;     // mpipemoe Eq. 4-6 bound where computed, else -1
  };
  std::vector<RankTotal> ranks;
};

// A per-layer tuning recommendation with its evidence (pipeline degree,
// memory-reuse strategy, expert placement).
struct Recommendation {
  std::int32_t layer = -1;      // -1: the whole model
  std::string subject;          // "pipeline degree", "memory reuse", "expert placement"
  std::string action;           // "r = 4", "S2: offload T_DI, recompute T_M"
  std::string evidence;         // why, in a sentence, citing the measured numbers
  double predicted_gain = -1;   // fraction of the layer time saved; < 0: not predicted
};

struct RecommendationData {
  std::vector<Recommendation> items;
};

struct AnalysisResults {
  std::optional<LocalityData> locality;
  std::optional<MemoryBubbleData> memory_bubbles;
  std::optional<RecommendationData> recommendations;
  std::string locality_error, memory_error, recommendations_error;  // the failed analysis's message
};

// Runs the analyses on a loaded trace (off the GUI thread): locality.h,
// memory.h and recommend.h of the analyzer, as `moetrace report` does.
AnalysisResults compute_analysis_results(const analyzer::Trace& trace);

}  // namespace moetrace::gui
