// Report sections as neutral blocks (paragraphs and tables) that the text,
// Markdown and HTML writers render alike (private to the analyzer).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <cstddef>
#include <iosfwd>

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/report.h"
#include "moetrace/analyzer/row_fields.h"

namespace moetrace::analyzer::report_detail {

using Table = ReportTable;
using Block = ReportBlock;
using Section = ReportSection;

// Summary lines of the breakdown (the text report's opening).
std::vector<std::string> breakdown_summary(const Trace& trace, const Breakdown& b);
// Why a trace with op ranges has no MoE layer, in one clause.
std::string no_moe_layer_reason(const Trace& trace);
// The breakdown as tables (Markdown and HTML; the text report keeps its
// fixed-width layout).
Section breakdown_section(const Trace& trace, const Breakdown& b, const ReportOptions& options);
// `not_computed_reason`: Analyses::fits_not_computed_reason.
Section fitted_models_section(const CostModel& m, const std::string& not_computed_reason = {});
Section recommendations_section(const Analyses& a);
// projection, nvtx, launch_queue, memory, expert_load, locality, fitted_models,
// recommendations.
std::vector<Section> analysis_sections(const Trace& trace, const Analyses& a, const ReportOptions& options);

// A run of several rank files: files, clocks, waiting at collectives
// (report_ranks.cc).
bool has_ranks_section(const Trace& trace);
// "8 ranks", or "1 of 8 ranks" where the trace holds fewer ranks than its job
// had (one rank's file of a tensor-parallel job, sampled ranks): the headers.
std::string ranks_recorded(const Trace& trace);
Section ranks_section(const Trace& trace, const Analyses& a, const ReportOptions& options);

// GPU idle time, launch queues and kernel launches, HTA's definitions
// (report_launch_queue.cc).
Section launch_queue_section(const Analyses& a, const ReportOptions& options);
// The critical path of each rank, HTA's definition (report_critical_path.cc).
Section critical_path_section(const Analyses& a, const ReportOptions& options);

// Expert TFLOP/s, collective bandwidths and waits against the GPUs'
// datasheet peaks (report_efficiency.cc; efficiency.h).
Section efficiency_section(const Analyses& a, const ReportOptions& options);
nlohmann::json efficiency_json(const Analyses& a);

// MoE recognition of a trace from another tool (report_recognition.cc).
// The kernels no rule classifies: Analyses::unclassified_kernels.
Section recognition_section(const Trace& trace, const Analyses& a);
nlohmann::json recognition_json(const Trace& trace, const Analyses& a);

void render_text(std::ostream& out, const Section& s);
void render_markdown(std::ostream& out, const Section& s);

std::string fmt_double(double v, int digits = 3);  // "0.123", "1.5e-12", "inf"

// The put(name, value) of row_fields.h for the JSON report: sets j[name].
inline auto json_put(nlohmann::json& j) {
  return [&j](std::string_view name, const auto& value) { j[std::string(name)] = value; };
}

// The rows of a per-rank table to list: all of them up to kRanksShownInFull
// ranks (or with `all`, --per-rank); beyond, the kFewRanks lowest, the median
// and the kFewRanks highest by `key`, and a line giving min, median and max
// (each value as `show` writes it) and what was left out. Rows have `.rank`.
inline constexpr std::size_t kFewRanks = 3;
template <class Rows, class Key, class Show>
std::pair<std::vector<std::size_t>, std::string> ranks_to_list(const Rows& rows, bool all, std::string_view by,
                                                               Key key, Show show) {
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  if (all || rows.size() <= kRanksShownInFull) return {order, ""};
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return key(rows[a]) < key(rows[b]); });
  const std::size_t n = order.size(), mid = order[n / 2];
  std::vector<std::size_t> picked(order.begin(), order.begin() + kFewRanks);
  picked.push_back(mid);
  picked.insert(picked.end(), order.end() - kFewRanks, order.end());
  return {picked, fmt::format("{} ranks by {}: min {} (rank {}), median {} (rank {}), max {} (rank {}); listing the "
                              "{} lowest, the median and the {} highest; --per-rank lists every rank.",
                              n, by, show(rows[order.front()]), rows[order.front()].rank, show(rows[mid]),
                              rows[mid].rank, show(rows[order.back()]), rows[order.back()].rank, kFewRanks,
                              kFewRanks)};
}

}  // namespace moetrace::analyzer::report_detail
