// Expert load as the heatmap shows it: for one iteration, tokens routed to
// each expert of each layer, summed over the source ranks. This is the raw
// expert_load table reshaped, not an analysis (imbalance metrics and
// locality come from the analyzer).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "moetrace/analyzer/trace.h"

namespace moetrace::gui {

struct ExpertLoadGrid {
  std::int32_t iteration = -1;
  std::vector<std::int32_t> layers;  // row order
  int experts = 0;                   // columns 0 .. experts-1
  std::vector<std::int64_t> tokens;  // layers x experts; -1: no record
  std::int64_t at(std::size_t layer_pos, int expert) const {
    return tokens[layer_pos * static_cast<std::size_t>(experts) + static_cast<std::size_t>(expert)];
  }
  std::int64_t layer_total(std::size_t layer_pos) const;
};

class ExpertLoadIndex {
 public:
  static ExpertLoadIndex from_trace(const analyzer::Trace& trace);
  bool empty() const { return iterations_.empty(); }
  std::span<const std::int32_t> iterations() const { return iterations_; }
  std::span<const std::int32_t> layers() const { return layers_; }
  int experts() const { return experts_; }
  // Largest cell over every iteration: one colour scale for the whole slider.
  std::int64_t max_tokens() const { return max_tokens_; }
  // Grid of the iteration at position `pos` in iterations().
  ExpertLoadGrid grid(const analyzer::Trace& trace, std::size_t pos) const;

 private:
  std::vector<std::int32_t> iterations_, layers_;
  std::vector<std::pair<std::size_t, std::size_t>> ranges_;  // per iteration, into expert_load
  int experts_ = 0;
  std::int64_t max_tokens_ = 0;
};

}  // namespace moetrace::gui
