// What the files of `moetrace recommend` share (private to moetrace::recommend):
//   recommend.cc     the driver: every MoE layer of a trace, advised and itemised
//   workloads.cc     each layer's workload (shapes, routing, parallel sizes) from
//                    the trace, the model file and the process groups
//   layer_advice.cc  the four recommenders (pipeline degree, memory reuse,
//                    placement, layout) and the replay of the trace's own
//                    configuration
//   advice_items.cc  their items (action, evidence, predicted gain)
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "hardware.h"
#include "moetrace/analyzer/breakdown.h"
#include "moetrace/analyzer/format.h"
#include "moetrace/analyzer/recommend.h"
#include "moetrace/analyzer/recommendations.h"
#include "moetrace/analyzer/trace.h"
#include "moetrace/analyzer/whatif.h"
#include "moetrace/plan/pro_prophet.h"

namespace moetrace::analyzer::detail {

// Notes that say the same of several layers, said once each: "layer 3:
// ..." or "layers 0-23: ..." (runs of three or more layers as a range).
class LayerNotes {
 public:
  void add(int layer, std::string text) {
    auto it = std::find_if(notes_.begin(), notes_.end(), [&](const auto& n) { return n.first == text; });
    if (it == notes_.end()) it = notes_.insert(notes_.end(), {std::move(text), {}});
    it->second.push_back(layer);
  }
  template <class Note>
  void say(Note& note) const {
    for (const auto& [text, layers] : notes_) {
      std::string list;
      for (std::size_t i = 0; i < layers.size();) {
        std::size_t j = i;
        while (j + 1 < layers.size() && layers[j + 1] == layers[j] + 1) ++j;
        const std::string run = j >= i + 2 ? fmt::format("{}-{}", layers[i], layers[j])
                                : j == i   ? fmt::format("{}", layers[i])
                                           : fmt::format("{}, {}", layers[i], layers[j]);
        list += (list.empty() ? "" : ", ") + run;
        i = j + 1;
      }
      note(fmt::format("layer{} {}: {}", layers.size() == 1 ? "" : "s", list, text));
    }
  }

 private:
  std::vector<std::pair<std::string, std::vector<int>>> notes_;  // in the order first said
};

template <typename T>
std::optional<T> config_number(const Trace& t, std::string_view key) {
  const auto s = t.config_value(key);
  if (s.empty()) return std::nullopt;
  T v{};
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

inline std::string ms(double s) { return fmt::format("{:.3f} ms", s * 1e3); }
inline std::string pct(double f) { return fmt::format("{:.1f} %", f * 100.0); }

struct LayerMeasures {
  double layer_s = -1;
  int iterations = 0;
  double fnec_s = 0, bnec_s = 0;
};

// workloads.cc
plan::LayerRouting recorded_routing(const Trace& trace, int layer, int iteration, int P, int E);

// layer_advice.cc
void replay_layer(const Trace& trace, const RecommendOptions& o, const Hardware& hw, const Breakdown& b,
                  const IterationReplay* iteration, LayerRecommendation& L);
void advise_pipeline(const Trace& trace, const RecommendOptions& o, const Hardware& hw, LayerRecommendation& L);
void advise_memory(const Trace& trace, const RecommendOptions& o, const Hardware& hw, std::int64_t peak,
                   LayerRecommendation& L);
std::optional<IterationReplay> own_iteration_replay(const Trace& trace, const RecommendOptions& o, const Hardware& hw,
                                                    const std::vector<MoeLayerWorkload>& workloads,
                                                    std::vector<std::string>& notes);
void advise_placement(const Trace& trace, const RecommendOptions& o, const Hardware& hw,
                      const LayerMeasures& meas, LayerRecommendation& L);
void advise_layout(const Trace& trace, const RecommendOptions& o, const Hardware& hw, LayerRecommendation& L);

// advice_items.cc
RecommendationItem pipeline_item(const LayerRecommendation& L, const Hardware& hw, double min_gain);
RecommendationItem memory_item(const LayerRecommendation& L);
RecommendationItem placement_item(const LayerRecommendation& L, double min_gain);
RecommendationItem layout_item(const LayerRecommendation& L, double min_gain);

}  // namespace moetrace::analyzer::detail
