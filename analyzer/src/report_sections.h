// Report sections as neutral blocks (paragraphs and tables) that the text,
// Markdown and HTML writers render alike (private to the analyzer).
#pragma once

#include <iosfwd>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moetrace/analyzer/analyses.h"
#include "moetrace/analyzer/report.h"

namespace moetrace::analyzer::report_detail {

using Table = ReportTable;
using Block = ReportBlock;
using Section = ReportSection;

// Summary lines of the breakdown (the text report's opening).
std::vector<std::string> breakdown_summary(const Breakdown& b);
// The breakdown as tables (Markdown and HTML; the text report keeps its
// fixed-width layout).
Section breakdown_section(const Breakdown& b, const ReportOptions& options);
Section fitted_models_section(const CostModel& m);
Section recommendations_section(const Analyses& a);
// projection, memory, expert_load, locality, fitted_models, recommendations.
std::vector<Section> analysis_sections(const Trace& trace, const Analyses& a, const ReportOptions& options);

// A run of several rank files: files, clocks, waiting at collectives
// (report_ranks.cc).
bool has_ranks_section(const Trace& trace);
Section ranks_section(const Trace& trace, const Analyses& a, const ReportOptions& options);

// MoE recognition of a trace from another tool (report_recognition.cc).
Section recognition_section(const Trace& trace);
nlohmann::json recognition_json(const Trace& trace);

void render_text(std::ostream& out, const Section& s);
void render_markdown(std::ostream& out, const Section& s);

std::string fmt_double(double v, int digits = 3);  // "0.123", "1.5e-12", "inf"

}  // namespace moetrace::analyzer::report_detail
